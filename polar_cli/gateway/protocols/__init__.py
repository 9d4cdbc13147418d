"""The protocol-adapter registry: ApiProtocol -> the `ADAPTER` object of one lazily imported
module (mini-swe-agent style name -> dotted-path map).

Owns: which module serves which provider API, importing it on first use, and the error that
lists the valid names when one is missing.
Out of scope: the adapters themselves (one module each), choosing the protocol for a request
(gateway/routing.py).

Adding a provider = one module exporting `ADAPTER` (an object implementing
`protocols.base.ProtocolAdapter`) plus one line in `ADAPTER_MODULES`.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import cast

from polar_cli.errors import SetupError
from polar_cli.gateway.protocols.base import ProtocolAdapter
from polar_cli.records import ApiProtocol

ADAPTER_MODULES: dict[ApiProtocol, str] = {
    ApiProtocol.OPENAI_CHAT: "polar_cli.gateway.protocols.openai_chat",
    ApiProtocol.OPENAI_RESPONSES: "polar_cli.gateway.protocols.openai_responses",
    ApiProtocol.ANTHROPIC_MESSAGES: "polar_cli.gateway.protocols.anthropic_messages",
    ApiProtocol.GOOGLE_GENERATE_CONTENT: "polar_cli.gateway.protocols.google_generate_content",
}

_cache: dict[ApiProtocol, ProtocolAdapter] = {}


class AdapterUnavailableError(SetupError):
    """The adapter module of a protocol is missing or does not export `ADAPTER`."""


def get_adapter(protocol: ApiProtocol | str) -> ProtocolAdapter:
    """The adapter serving `protocol`, imported on first use and cached."""
    try:
        key = ApiProtocol(protocol)
    except ValueError:
        valid = ", ".join(p.value for p in ApiProtocol)
        raise AdapterUnavailableError(f"unknown protocol {protocol!r}; valid: {valid}") from None
    cached = _cache.get(key)
    if cached is not None:
        return cached
    dotted = ADAPTER_MODULES[key]
    try:
        module = importlib.import_module(dotted)
    except ModuleNotFoundError as exc:
        if exc.name != dotted:
            raise
        raise AdapterUnavailableError(
            f"protocol {key.value} has no adapter yet: module {dotted} is missing "
            f"(available: {', '.join(p.value for p in available_protocols())})"
        ) from None
    adapter = getattr(module, "ADAPTER", None)
    if adapter is None:
        raise AdapterUnavailableError(f"{dotted} does not export ADAPTER")
    _cache[key] = cast(ProtocolAdapter, adapter)
    return _cache[key]


def available_protocols() -> list[ApiProtocol]:
    """The protocols whose adapter module is importable right now."""
    out: list[ApiProtocol] = []
    for key, dotted in ADAPTER_MODULES.items():
        if key in _cache or importlib.util.find_spec(dotted) is not None:
            out.append(key)
    return out


__all__ = ["ADAPTER_MODULES", "AdapterUnavailableError", "available_protocols", "get_adapter"]
