import pytest

from inikit import loads


def test_getint():
    assert loads("[a]\nn = 42\n").getint("a", "n") == 42


def test_getint_default():
    assert loads("[a]\n").getint("a", "n", 7) == 7


def test_getbool_values():
    cfg = loads("[a]\nx = yes\ny = 0\n")
    assert cfg.getbool("a", "x") is True
    assert cfg.getbool("a", "y") is False


def test_getbool_invalid():
    with pytest.raises(ValueError):
        loads("[a]\nx = maybe\n").getbool("a", "x")


def test_getlist():
    assert loads("[a]\nxs = a, b ,c,\n").getlist("a", "xs") == ["a", "b", "c"]
