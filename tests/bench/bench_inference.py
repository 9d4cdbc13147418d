"""Benchmark of the scripted inference backend (the CPU stand-in), through its real HTTP path.

Prints: tokenizer build and load time; per-call latency of a growing session (the prompt grows by
one turn per call, as with a harness) at ~1k and ~32k prompt tokens; requests/s at 16 and 64
concurrent sessions. Not part of the pass/fail suite (`make bench`).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from polar_cli.inference import open_backend
from polar_cli.inference.tokenizer import build_tokenizer_json, load_tokenizer
from polar_cli.recipe.schema import ScriptedInference
from polar_cli.records import ChatRequest

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}
FILLER = "def handler(request):\n    return compute(request.payload, retries=3)  # ok\n"


async def grow_session(backend: Any, session: str, target_tokens: int) -> list[float]:
    """Call until the prompt passes target_tokens; latencies (ms) of the last 10 calls."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the bug."}]
    latencies: list[float] = []
    prompt_len, i = 0, 0
    while prompt_len < target_tokens or len(latencies) < 10:
        req = ChatRequest(call_id=f"{session}-{i}", model=backend.model, messages=list(messages),
                          tools=[BASH], session_id=session)  # fmt: skip
        t0 = time.perf_counter()
        res = await backend.chat(req)
        latencies.append((time.perf_counter() - t0) * 1000)
        prompt_len, i = len(res.prompt_ids), i + 1
        messages.append({"role": "assistant", "content": "Looking further."})
        messages.append({"role": "user", "content": FILLER * max(1, target_tokens // 400)})
    return latencies[-10:]


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        build_tokenizer_json("qwen3", Path(tmp))
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        load_tokenizer("qwen3", Path(tmp))
        load_s = time.perf_counter() - t0
    print(f"tokenizer: build {build_s:.2f} s, load {load_s * 1000:.0f} ms")
    cfg = ScriptedInference(policies={"noop": 1.0}, context_length=200_000)
    async with open_backend(cfg, run_dir=Path(tempfile.gettempdir())) as backend:
        for target in (1_000, 32_000):
            lat = await grow_session(backend, f"grow-{target}", target)
            print(f"growing session at ~{target} prompt tokens: p50 {statistics.median(lat):.1f} ms"
                  f", max {max(lat):.1f} ms")  # fmt: skip
        for conc in (16, 64):
            msgs = [{"role": "user", "content": FILLER * 20}]
            reqs = [ChatRequest(call_id=f"c{conc}-{i}", model=backend.model, messages=msgs,
                                tools=[BASH], session_id=f"s{i}") for i in range(conc * 8)]  # fmt: skip
            sem = asyncio.Semaphore(conc)

            async def one(r: ChatRequest, sem: asyncio.Semaphore = sem) -> None:
                async with sem:
                    await backend.chat(r)

            t0 = time.perf_counter()
            await asyncio.gather(*(one(r) for r in reqs))
            print(f"concurrency {conc}: {len(reqs) / (time.perf_counter() - t0):.0f} requests/s")


if __name__ == "__main__":
    asyncio.run(main())
