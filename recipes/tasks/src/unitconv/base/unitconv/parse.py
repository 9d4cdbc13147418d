"""Parsing and formatting quantities written as text, e.g. "12.5 kg"."""

import re

from unitconv.units import lookup

_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*$")


def parse_quantity(text: str) -> tuple[float, str]:
    """Split "12.5 kg" into (12.5, "kg"). The unit must be known."""
    m = _QUANTITY.match(text)
    if m is None:
        raise ValueError(f"not a quantity: {text!r}")
    number, unit = m.groups()
    lookup(unit)
    return float(number), unit


def format_quantity(value: float, unit: str, precision: int = 2) -> str:
    """Format a value and unit, dropping trailing zeros: (2.50, "m") -> "2.5 m"."""
    text = f"{value:.{precision}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text} {unit}"
