"""Which endpoint a request is for: provider protocol by path suffix, then headers, then body.

Owns: classifying (method, path, headers, query) into a Route, and picking the protocol whose
error shape an unroutable request gets. Out of scope: serving the route (server.py).

Routing is by suffix so base URLs with a path prefix work (`http://h:p/gw/s1/v1`): each harness
appends its own suffix (`/chat/completions`, `/responses`, `/v1/messages`, `/v1beta/models/...`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from polar_cli.records import ApiProtocol


class RouteKind(StrEnum):
    GENERATE = "generate"  # a model call
    COUNT_TOKENS = "count_tokens"  # Anthropic /v1/messages/count_tokens
    LIST_MODELS = "list_models"
    GET_MODEL = "get_model"
    ROOT = "root"  # HEAD / GET on a base URL (claude's preconnect)
    HEALTH = "health"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    NOT_FOUND = "not_found"


@dataclass(frozen=True)
class Route:
    kind: RouteKind
    protocol: ApiProtocol | None  # None on a POST whose path names no protocol: body decides
    model: str | None = None  # model named in the path (Google, /v1/models/{id})
    stream: bool | None = None  # forced by the path (Google), else the body decides
    sse: bool = True  # Google streamGenerateContent without ?alt=sse answers a JSON array


_POST_SUFFIXES: tuple[tuple[str, RouteKind, ApiProtocol], ...] = (
    ("/chat/completions", RouteKind.GENERATE, ApiProtocol.OPENAI_CHAT),
    ("/responses", RouteKind.GENERATE, ApiProtocol.OPENAI_RESPONSES),
    ("/messages/count_tokens", RouteKind.COUNT_TOKENS, ApiProtocol.ANTHROPIC_MESSAGES),
    ("/messages", RouteKind.GENERATE, ApiProtocol.ANTHROPIC_MESSAGES),
)
_HEALTH_PATHS = ("/health", "/healthz", "/v1/health", "/ping")


def protocol_from_headers(headers: Mapping[str, str]) -> ApiProtocol | None:
    if "anthropic-version" in headers or "x-api-key" in headers:
        return ApiProtocol.ANTHROPIC_MESSAGES
    if "x-goog-api-key" in headers or "x-goog-api-client" in headers:
        return ApiProtocol.GOOGLE_GENERATE_CONTENT
    return None


def protocol_from_body(body: Any, headers: Mapping[str, str]) -> ApiProtocol:
    """Body shape for a POST whose path names no protocol (Polar's last resort)."""
    if isinstance(body, dict):
        if "contents" in body:
            return ApiProtocol.GOOGLE_GENERATE_CONTENT
        if "input" in body or "instructions" in body:
            return ApiProtocol.OPENAI_RESPONSES
        by_header = protocol_from_headers(headers)
        if by_header is not None:
            return by_header
        if "system" in body and "messages" in body:
            return ApiProtocol.ANTHROPIC_MESSAGES
    return ApiProtocol.OPENAI_CHAT


def error_protocol(path: str, headers: Mapping[str, str]) -> ApiProtocol:
    """The protocol whose error shape a request gets when its route does not say."""
    if "/v1beta/" in path or path.endswith("/v1beta"):
        return ApiProtocol.GOOGLE_GENERATE_CONTENT
    return protocol_from_headers(headers) or ApiProtocol.OPENAI_CHAT


def _google_model_call(path: str) -> tuple[str, str] | None:
    """`.../models/{model}:{method}` -> (model, method)."""
    _head, sep, tail = path.rpartition("/models/")
    if not sep:
        return None
    model, colon, method = tail.rpartition(":")
    if not colon or not model:
        return None
    return model, method


def classify(method: str, path: str, query: Mapping[str, str]) -> Route:
    path = path.rstrip("/") or "/"
    if method == "POST":
        for suffix, kind, protocol in _POST_SUFFIXES:
            if path.endswith(suffix):
                return Route(kind, protocol)
        call = _google_model_call(path)
        if call is not None:
            model, verb = call
            if verb == "generateContent":
                return Route(RouteKind.GENERATE, ApiProtocol.GOOGLE_GENERATE_CONTENT, model, False)
            if verb == "streamGenerateContent":
                sse = query.get("alt") == "sse"
                return Route(
                    RouteKind.GENERATE, ApiProtocol.GOOGLE_GENERATE_CONTENT, model, True, sse
                )
            if verb == "countTokens":
                return Route(RouteKind.COUNT_TOKENS, ApiProtocol.GOOGLE_GENERATE_CONTENT, model)
            return Route(RouteKind.NOT_FOUND, ApiProtocol.GOOGLE_GENERATE_CONTENT)
        if path.endswith(("/v1", "/v1beta")) or path == "/":
            return Route(RouteKind.NOT_FOUND, None)
        return Route(RouteKind.GENERATE, None)  # unknown path: the body shape decides
    if method in ("GET", "HEAD"):
        if path.endswith(_HEALTH_PATHS):
            return Route(RouteKind.HEALTH, None)
        if path.endswith("/models"):
            google = "/v1beta" in path
            return Route(
                RouteKind.LIST_MODELS, ApiProtocol.GOOGLE_GENERATE_CONTENT if google else None
            )
        head, sep, model = path.rpartition("/models/")
        if sep and model and ":" not in model:
            google = "/v1beta" in head or head.endswith("/v1beta")
            return Route(
                RouteKind.GET_MODEL, ApiProtocol.GOOGLE_GENERATE_CONTENT if google else None, model
            )
        for suffix, _kind, protocol in _POST_SUFFIXES:
            if path.endswith(suffix):
                return Route(RouteKind.METHOD_NOT_ALLOWED, protocol)
        return Route(RouteKind.ROOT, None)
    return Route(RouteKind.METHOD_NOT_ALLOWED, None)


def session_key(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The session key from `Authorization: Bearer`, `x-api-key`, `x-goog-api-key` or `?key=`."""
    auth = headers.get("Authorization")
    if auth:
        scheme, _, token = auth.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    for name in ("x-api-key", "x-goog-api-key"):
        value = headers.get(name)
        if value:
            return value.strip()
    return query.get("key") or None
