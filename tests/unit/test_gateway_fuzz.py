"""Bounded fuzzing: a few thousand random and mutated requests (captured harness bodies with
parts deleted, retyped or replaced, truncated or corrupted bytes, random paths and headers)
against the real gateway over loopback. Every request must get an answer that is a
provider-shaped error (4xx, never 5xx: a 5xx here means an unhandled exception) or a valid
answer, and the gateway must still serve a normal call afterwards."""

from __future__ import annotations

import asyncio
import copy
import json
import random
from pathlib import Path
from typing import Any

import aiohttp

from polar_cli.gateway import Gateway
from polar_cli.gateway.fake_upstream import FakeUpstream

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harness-captures"
SEED_BODIES: list[tuple[str, dict[str, Any]]] = []
for _f in sorted(CAPTURES.glob("*/*.json")):
    _cap = json.loads(_f.read_text())
    if isinstance(_cap.get("body"), dict):
        SEED_BODIES.append((_cap["path"], _cap["body"]))
PATHS = [
    "/v1/chat/completions",
    "/v1/responses",
    "/v1/messages?beta=true",
    "/v1/messages/count_tokens",
    "/v1beta/models/m:generateContent",
    "/v1beta/models/m:streamGenerateContent?alt=sse",
    "/v1beta/models/m:streamGenerateContent",
    "/x/y/v1/chat/completions",
    "/v1/unknown",
    "/",
]
REQUESTS = 2500
BATCH = 50


def random_value(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["none", "bool", "int", "float", "str", "list", "dict"] if depth < 3 else ["str", "int"]
    kind = rng.choice(kinds)
    if kind == "none":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        return rng.choice([0, -1, 1, 2**63, rng.randint(-1000, 1000)])
    if kind == "float":
        return rng.choice([0.5, -3.25, 1e308, 1e-9])
    if kind == "str":
        return rng.choice(
            [
                "",
                "user",
                "assistant",
                "tool",
                "text",
                "function",
                "\u0000",
                "x" * 50,
                '{"a":',
                "tool_use",
                "function_call",
                "model",
                "🙂",
            ]
        )
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {
        rng.choice(
            ["role", "type", "content", "text", "parts", "name", "id", "args"]
        ): random_value(rng, depth + 1)
        for _ in range(rng.randint(0, 3))
    }


def mutate(rng: random.Random, body: Any) -> Any:
    """Replace, delete or retype one random node of the JSON tree."""
    body = copy.deepcopy(body)
    node, parent, key = body, None, None
    for _ in range(rng.randint(0, 6)):
        if isinstance(node, dict) and node:
            parent, key = node, rng.choice(list(node))
        elif isinstance(node, list) and node:
            parent, key = node, rng.randrange(len(node))
        else:
            break
        node = parent[key]
    if parent is None:
        return random_value(rng)
    action = rng.random()
    if action < 0.3 and isinstance(parent, dict):
        del parent[key]
    elif action < 0.45:
        parent[key] = [node]
    else:
        parent[key] = random_value(rng)
    return body


def make_request(rng: random.Random, key: str) -> tuple[str, dict[str, str], bytes]:
    seed_path, seed = rng.choice(SEED_BODIES)
    path = seed_path if rng.random() < 0.6 else rng.choice(PATHS)
    body: Any = seed
    for _ in range(rng.randint(1, 3)):
        body = mutate(rng, body)
    if isinstance(body, dict) and rng.random() < 0.5:
        body["stream"] = rng.random() < 0.5
    raw = json.dumps(body).encode()
    r = rng.random()
    if r < 0.1:
        raw = raw[: rng.randrange(len(raw) + 1)]
    elif r < 0.15:
        raw = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
    headers = {"Content-Type": "application/json"}
    auth = rng.choice(["Authorization", "x-api-key", "x-goog-api-key"])
    value = key if rng.random() < 0.9 else "sk-polar-wrong"
    headers[auth] = f"Bearer {value}" if auth == "Authorization" else value
    if rng.random() < 0.3:
        headers["anthropic-version"] = "2023-06-01"
    return path, headers, raw


def test_gateway_survives_random_and_mutated_requests(tmp_path: Path) -> None:
    assert SEED_BODIES, f"no captures under {CAPTURES}"
    rng = random.Random(1234)
    statuses: dict[int, int] = {}
    bad: list[str] = []

    async def one(http: aiohttp.ClientSession, base: str, key: str) -> None:
        path, headers, raw = make_request(rng, key)
        async with http.post(base + path, data=raw, headers=headers) as r:
            payload = await r.read()
        statuses[r.status] = statuses.get(r.status, 0) + 1
        if r.status >= 500 or r.status not in (200, 400, 401, 404, 405, 413):
            bad.append(f"{r.status} {path}: {payload[:300]!r}")
        elif r.status != 200:
            json.loads(payload)  # every error is a JSON body
        elif r.headers["Content-Type"].startswith("application/json"):
            json.loads(payload)
        else:
            assert payload.endswith(b"\n\n"), payload[-100:]

    async def go() -> None:
        async with Gateway(FakeUpstream(), max_body_bytes=1 << 20) as gw:
            key = gw.register_session(
                "s", instance_id="i", harness="h", capture_path=tmp_path / "c.jsonl"
            )
            async with aiohttp.ClientSession() as http:
                for _ in range(REQUESTS // BATCH):
                    await asyncio.gather(*(one(http, gw.base_url, key) for _ in range(BATCH)))
                ok = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
                hdr = {"Authorization": f"Bearer {key}"}
                async with http.post(
                    gw.base_url + "/v1/chat/completions", json=ok, headers=hdr
                ) as r:
                    assert r.status == 200
                async with http.get(gw.base_url + "/health") as r:
                    assert r.status == 200

    asyncio.run(go())
    print(statuses)
    assert sum(statuses.values()) == REQUESTS
    assert not bad, "\n".join(bad[:20])
    assert statuses.get(200, 0) > 100 and statuses.get(400, 0) > 100, statuses
