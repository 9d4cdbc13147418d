import pytest

from spans import Interval, merge_all


def test_contains_is_half_open():
    iv = Interval(1, 3)
    assert 1 in iv and 2 in iv and 3 not in iv


def test_overlaps():
    assert Interval(1, 3).overlaps(Interval(2, 5))
    assert not Interval(1, 3).overlaps(Interval(3, 5))


def test_invalid_interval():
    with pytest.raises(ValueError):
        Interval(5, 1)


def test_merge_overlapping():
    assert merge_all([Interval(5, 8), Interval(1, 3), Interval(2, 4)]) == [
        Interval(1, 4),
        Interval(5, 8),
    ]


def test_merge_nested():
    assert merge_all([Interval(1, 10), Interval(2, 3)]) == [Interval(1, 10)]
