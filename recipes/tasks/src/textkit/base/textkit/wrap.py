"""Greedy word wrapping into lines of at most `width` characters."""


def wrap(text: str, width: int) -> list[str]:
    """Wrap words greedily. A word longer than `width` gets a line of its own (not split)."""
    if width < 1:
        raise ValueError("width must be >= 1")
    lines: list[str] = []
    current = ""
    for word in text.split():
        if len(current) + len(word) + (1 if current else 0) <= width:
            current = f"{current} {word}" if current else word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines
