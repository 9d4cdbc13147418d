"""Calendar arithmetic on datetime.date: leap years, month lengths, adding months."""

from datetime import date

_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def is_leap(year: int) -> bool:
    """Gregorian leap year."""
    return year % 4 == 0


def days_in_month(year: int, month: int) -> int:
    if not 1 <= month <= 12:
        raise ValueError(f"month must be in 1..12, got {month}")
    if month == 2 and is_leap(year):
        return 29
    return _DAYS[month - 1]


def add_months(day: date, months: int) -> date:
    """Add (or subtract) whole months, clamping the day to the target month's length:
    Jan 31 + 1 month -> Feb 28 (or 29)."""
    index = day.year * 12 + (day.month - 1) + months
    year, month = divmod(index, 12)
    month += 1
    return date(year, month, min(day.day, days_in_month(year, month)))
