import pytest

from unitconv import UnknownUnitError, format_quantity, parse_quantity


def test_parse_simple():
    assert parse_quantity("12.5 kg") == (12.5, "kg")


def test_parse_no_space():
    assert parse_quantity("3km") == (3.0, "km")


def test_parse_unknown_unit():
    with pytest.raises(UnknownUnitError):
        parse_quantity("3 parsecs")


def test_parse_garbage():
    with pytest.raises(ValueError):
        parse_quantity("kg 12")


def test_format_drops_trailing_zeros():
    assert format_quantity(2.50, "m") == "2.5 m"
    assert format_quantity(3.0, "kg") == "3 kg"
