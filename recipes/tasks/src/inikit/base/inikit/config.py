"""The parsed configuration and its typed getters."""

_TRUE = ("1", "yes", "true", "on")
_FALSE = ("0", "no", "false", "off")


class Config:
    """Sections of string values; a missing key falls back to the DEFAULT section."""

    def __init__(self) -> None:
        self._data: dict[str, dict[str, str]] = {"DEFAULT": {}}

    def add_section(self, name: str) -> None:
        self._data.setdefault(name, {})

    def sections(self) -> list[str]:
        return [name for name in self._data if name != "DEFAULT"]

    def set(self, section: str, key: str, value: str) -> None:
        self.add_section(section)
        self._data[section][key.lower()] = value

    def get(self, section: str, key: str, default: str | None = None) -> str | None:
        key = key.lower()
        values = self._data.get(section, {})
        if key in values:
            return values[key]
        return self._data["DEFAULT"].get(key, default)

    def getint(self, section: str, key: str, default: int | None = None) -> int | None:
        value = self.get(section, key)
        return default if value is None else int(value)

    def getbool(self, section: str, key: str, default: bool | None = None) -> bool | None:
        value = self.get(section, key)
        if value is None:
            return default
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise ValueError(f"[{section}] {key}: not a boolean: {value!r}")

    def getlist(self, section: str, key: str) -> list[str]:
        value = self.get(section, key)
        if not value:
            return []
        return [item.strip() for item in value.split(",") if item.strip()]
