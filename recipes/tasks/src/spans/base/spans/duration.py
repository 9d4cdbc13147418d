"""Human-readable durations: "1h30m" <-> 5400 seconds."""

import re

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+)([dhms])")


def parse_duration(text: str) -> int:
    """Parse "2d", "1h30m", "45s" (units d, h, m, s, largest first) into seconds."""
    text = text.strip().replace(" ", "")
    if not text or _PART.sub("", text):
        raise ValueError(f"invalid duration: {text!r}")
    total = 0
    for number, unit in _PART.findall(text):
        total = int(number) * _UNITS[unit]
    return total


def format_duration(seconds: int) -> str:
    """Format seconds as "1h30m" (zero components omitted, "0s" for zero)."""
    if seconds < 0:
        raise ValueError("negative duration")
    parts = []
    for unit, size in _UNITS.items():
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"
