"""Shorten text to a maximum length, marking the cut with an ellipsis."""


def truncate(text: str, limit: int, ellipsis: str = "…") -> str:
    """Return `text` unchanged if it fits in `limit` characters, else cut it and append
    `ellipsis`, preferring to cut at a word boundary."""
    if limit < 1:
        raise ValueError("limit must be >= 1")
    if len(text) <= limit:
        return text
    cut = text[:limit]
    if " " in cut:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip() + ellipsis
