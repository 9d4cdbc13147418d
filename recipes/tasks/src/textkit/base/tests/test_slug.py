from textkit import slugify


def test_simple():
    assert slugify("Hello World") == "hello-world"


def test_accents():
    assert slugify("Crème brûlée") == "creme-brulee"


def test_custom_separator():
    assert slugify("a b c", sep="_") == "a_b_c"


def test_digits_kept():
    assert slugify("Release 2 0") == "release-2-0"
