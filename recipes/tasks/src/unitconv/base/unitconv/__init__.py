"""unitconv: convert physical quantities between units."""

from unitconv.convert import convert
from unitconv.parse import format_quantity, parse_quantity
from unitconv.units import UnknownUnitError, lookup

__all__ = ["UnknownUnitError", "convert", "format_quantity", "lookup", "parse_quantity"]
__version__ = "0.1.0"
