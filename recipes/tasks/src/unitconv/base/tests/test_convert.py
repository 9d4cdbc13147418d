import pytest

from unitconv import convert
from unitconv.convert import DimensionError


def test_length_km_to_m():
    assert convert(5, "km", "m") == 5000.0


def test_length_inch_to_cm():
    assert convert(1, "in", "cm") == pytest.approx(2.54)


def test_mass_lb_to_kg():
    assert convert(10, "lb", "kg") == pytest.approx(4.5359237)


def test_time_hours_to_minutes():
    assert convert(1.5, "h", "min") == pytest.approx(90.0)


def test_celsius_to_kelvin():
    assert convert(25, "C", "K") == pytest.approx(298.15)


def test_fahrenheit_to_kelvin():
    assert convert(32, "F", "K") == pytest.approx(273.15)


def test_dimension_mismatch():
    with pytest.raises(DimensionError):
        convert(1, "kg", "m")


def test_aliases_and_case():
    assert convert(2, "Kilometre", "meter") == 2000.0
    assert convert(1, "KM", "m") == 1000.0
