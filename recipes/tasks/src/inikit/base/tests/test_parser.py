import pytest

from inikit import ParseError, loads


def test_sections_and_pairs():
    cfg = loads("[server]\nhost = example.org\nport = 8080\n")
    assert cfg.sections() == ["server"]
    assert cfg.get("server", "host") == "example.org"


def test_comments_and_blank_lines():
    cfg = loads("; a comment\n# another\n\n[a]\nx = 1\n")
    assert cfg.get("a", "x") == "1"


def test_colon_separator():
    cfg = loads("[a]\nname: demo\n")
    assert cfg.get("a", "name") == "demo"


def test_keys_are_case_insensitive():
    cfg = loads("[a]\nName = demo\n")
    assert cfg.get("a", "NAME") == "demo"


def test_default_section_fallback():
    cfg = loads("retries = 3\n[job]\nname = x\n")
    assert cfg.get("job", "retries") == "3"


def test_bad_line():
    with pytest.raises(ParseError) as info:
        loads("[a]\njust some words\n")
    assert info.value.lineno == 2
