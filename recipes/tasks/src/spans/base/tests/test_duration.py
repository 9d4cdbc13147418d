import pytest

from spans import format_duration, parse_duration


def test_parse_single_unit():
    assert parse_duration("45s") == 45
    assert parse_duration("2d") == 172800


def test_parse_invalid():
    with pytest.raises(ValueError):
        parse_duration("ten minutes")


def test_format():
    assert format_duration(5400) == "1h30m"
    assert format_duration(0) == "0s"
