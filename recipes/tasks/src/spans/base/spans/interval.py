"""Half-open intervals [start, end) over any ordered values (numbers, dates, datetimes)."""

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class Interval:
    start: Any
    end: Any

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"interval ends before it starts: {self.start!r} > {self.end!r}")

    def __contains__(self, value: Any) -> bool:
        return self.start <= value < self.end

    def overlaps(self, other: "Interval") -> bool:
        """True when the two intervals share at least one point."""
        return self.start < other.end and other.start < self.end

    def length(self) -> Any:
        return self.end - self.start


def merge_all(intervals: list[Interval]) -> list[Interval]:
    """Merge overlapping or adjacent intervals; the result is sorted and disjoint.

    [1, 3) and [3, 5) are adjacent: together they cover [1, 5) without a gap.
    """
    merged: list[Interval] = []
    for cur in sorted(intervals):
        if merged and cur.start < merged[-1].end:
            last = merged[-1]
            merged[-1] = Interval(last.start, max(last.end, cur.end))
        else:
            merged.append(cur)
    return merged
