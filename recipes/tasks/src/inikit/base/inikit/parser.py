"""Turn INI text into a Config: sections, key/value pairs and comments."""

from inikit.config import Config

COMMENT_PREFIXES = (";", "#")


class ParseError(ValueError):
    """Raised for a line that is neither a section header, a pair nor a comment."""

    def __init__(self, lineno: int, line: str) -> None:
        super().__init__(f"line {lineno}: cannot parse {line!r}")
        self.lineno = lineno


def _parse_pair(line: str, lineno: int) -> tuple[str, str]:
    if "=" in line:
        key, value = line.split("=")
    elif ":" in line:
        key, value = line.split(":", 1)
    else:
        raise ParseError(lineno, line)
    key = key.strip().lower()
    if not key:
        raise ParseError(lineno, line)
    return key, value.strip()


def loads(text: str) -> Config:
    """Parse INI text. Keys are case-insensitive; pairs before any section go to "DEFAULT"."""
    config = Config()
    section = "DEFAULT"
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(COMMENT_PREFIXES):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            config.add_section(section)
            continue
        key, value = _parse_pair(line, lineno)
        config.set(section, key, value)
    return config
