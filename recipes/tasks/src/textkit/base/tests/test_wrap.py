import pytest

from textkit import wrap


def test_wrap_basic():
    assert wrap("the quick brown fox", 10) == ["the quick", "brown fox"]


def test_wrap_fits():
    assert wrap("short", 10) == ["short"]


def test_wrap_empty():
    assert wrap("", 10) == []


def test_wrap_invalid_width():
    with pytest.raises(ValueError):
        wrap("x", 0)
