from datetime import date

from spans import add_months, days_in_month, is_leap


def test_leap_years():
    assert is_leap(2024)
    assert not is_leap(2023)
    assert is_leap(2000)


def test_days_in_february():
    assert days_in_month(2024, 2) == 29
    assert days_in_month(2023, 2) == 28


def test_add_months_clamps():
    assert add_months(date(2023, 1, 31), 1) == date(2023, 2, 28)


def test_add_months_across_years():
    assert add_months(date(2023, 11, 15), 3) == date(2024, 2, 15)
    assert add_months(date(2024, 1, 15), -2) == date(2023, 11, 15)
