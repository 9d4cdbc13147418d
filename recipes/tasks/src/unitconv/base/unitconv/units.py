"""The unit registry: every unit's dimension and its factor to the SI base unit."""

from dataclasses import dataclass


class UnknownUnitError(KeyError):
    """Raised when a unit symbol or name is not in the registry."""


@dataclass(frozen=True)
class Unit:
    symbol: str
    dimension: str
    factor: float  # multiply by this to get the SI base unit


_UNITS = [
    Unit("m", "length", 1.0),
    Unit("mm", "length", 1e-3),
    Unit("cm", "length", 1e-2),
    Unit("km", "length", 1e3),
    Unit("Mm", "length", 1e6),
    Unit("in", "length", 0.0254),
    Unit("ft", "length", 0.3048),
    Unit("mi", "length", 1609.344),
    Unit("g", "mass", 1e-3),
    Unit("kg", "mass", 1.0),
    Unit("mg", "mass", 1e-6),
    Unit("lb", "mass", 0.45359237),
    Unit("s", "time", 1.0),
    Unit("min", "time", 60.0),
    Unit("h", "time", 3600.0),
    Unit("K", "temperature", 1.0),
    Unit("C", "temperature", 1.0),
    Unit("F", "temperature", 5.0 / 9.0),
]

_ALIASES = {
    "meter": "m",
    "metre": "m",
    "kilometer": "km",
    "kilometre": "km",
    "inch": "in",
    "foot": "ft",
    "feet": "ft",
    "mile": "mi",
    "gram": "g",
    "kilogram": "kg",
    "pound": "lb",
    "second": "s",
    "minute": "min",
    "hour": "h",
    "kelvin": "K",
    "celsius": "C",
    "fahrenheit": "F",
}

_BY_KEY = {u.symbol.lower(): u for u in _UNITS}


def lookup(name: str) -> Unit:
    """Find a unit by symbol or name. Symbols and names are matched case-insensitively
    so that "KM", "Km" and "kilometre" all work."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    try:
        return _BY_KEY[key.lower()]
    except KeyError:
        raise UnknownUnitError(name) from None
