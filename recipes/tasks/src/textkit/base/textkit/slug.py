"""URL slugs: lower-case ASCII words joined by a separator."""

import re
import unicodedata

_NOT_WORD = re.compile(r"[^a-z0-9]")


def slugify(text: str, sep: str = "-") -> str:
    """"Héllo, World!" -> "hello-world". Accents are folded to ASCII, everything that is not a
    letter or digit becomes a separator."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return _NOT_WORD.sub(sep, ascii_text.lower())
