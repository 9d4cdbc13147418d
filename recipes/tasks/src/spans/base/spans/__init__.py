"""spans: half-open intervals, calendar arithmetic and human durations."""

from spans.calendar import add_months, days_in_month, is_leap
from spans.duration import format_duration, parse_duration
from spans.interval import Interval, merge_all

__all__ = [
    "Interval",
    "add_months",
    "days_in_month",
    "format_duration",
    "is_leap",
    "merge_all",
    "parse_duration",
]
__version__ = "0.1.0"
