"""Conversion between units of the same dimension."""

from unitconv.units import Unit, lookup

# Kelvin = (value + offset) * scale
_TEMPERATURE = {
    "K": (0.0, 1.0),
    "C": (273.15, 1.0),
    "F": (459.67, 5.0 / 9.0),
}


class DimensionError(ValueError):
    """Raised when converting between units of different dimensions."""


def _to_kelvin(value: float, unit: Unit) -> float:
    offset, scale = _TEMPERATURE[unit.symbol]
    return (value + offset) * scale


def _from_kelvin(value: float, unit: Unit) -> float:
    offset, scale = _TEMPERATURE[unit.symbol]
    return value * scale - offset


def convert(value: float, src: str, dst: str) -> float:
    """Convert `value` from unit `src` to unit `dst`."""
    a, b = lookup(src), lookup(dst)
    if a.dimension != b.dimension:
        raise DimensionError(f"cannot convert {a.dimension} ({src}) to {b.dimension} ({dst})")
    if a.dimension == "temperature":
        return _from_kelvin(_to_kelvin(float(value), a), b)
    return float(value) * a.factor / b.factor
