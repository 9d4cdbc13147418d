"""inikit: a small, forgiving INI file reader."""

from inikit.config import Config
from inikit.parser import ParseError, loads

__all__ = ["Config", "ParseError", "loads"]
__version__ = "0.1.0"
