"""textkit: slugs, word wrapping and truncation for short display strings."""

from textkit.slug import slugify
from textkit.truncate import truncate
from textkit.wrap import wrap

__all__ = ["slugify", "truncate", "wrap"]
__version__ = "0.1.0"
