from textkit import truncate


def test_fits_unchanged():
    assert truncate("hello", 10) == "hello"


def test_exact_fit():
    assert truncate("hello", 5) == "hello"
