"""Translation cost of the Anthropic Messages and Google generateContent adapters per model call:
request -> canonical, and canonical answer -> JSON body / SSE stream, on pi's captured requests
(anthropic-messages, google-generative-ai) grown to ~1k, ~8k and ~32k tokens of conversation (tool-call turns with
~500-byte results appended). Prints milliseconds per call (median of repeats); asserts nothing.

Run: python tests/bench/bench_gateway_anthropic_google.py
"""

from __future__ import annotations

import copy
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from polar_cli.gateway.protocols import anthropic_messages as am
from polar_cli.gateway.protocols import google_generate_content as gg
from polar_cli.records import ChatResult

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harness-captures"
BYTES_PER_TOKEN = 4  # rough size of a token of English / code


def per_call_ms(fn: Callable[[], object], budget_s: float = 0.5) -> float:
    fn()
    samples = []
    deadline = time.perf_counter() + budget_s
    while time.perf_counter() < deadline or len(samples) < 5:
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def grow_anthropic(body: dict[str, Any], tokens: int) -> dict[str, Any]:
    body = copy.deepcopy(body)
    i = 0
    while len(json.dumps(body)) < tokens * BYTES_PER_TOKEN:
        call = {
            "type": "tool_use",
            "id": f"toolu_{i}",
            "name": "Bash",
            "input": {"command": f"cat f{i}"},
        }
        body["messages"].append(
            {"role": "assistant", "content": [{"type": "text", "text": "Next."}, call]}
        )
        result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "x = 1\n" * 80}
        body["messages"].append({"role": "user", "content": [result]})
        i += 1
    return body


def grow_google(body: dict[str, Any], tokens: int) -> dict[str, Any]:
    body = copy.deepcopy(body)
    while len(json.dumps(body)) < tokens * BYTES_PER_TOKEN:
        call = {"functionCall": {"name": "bash", "args": {"command": "cat f"}}}
        body["contents"].append({"role": "model", "parts": [{"text": "Next."}, call]})
        answer = {"name": "bash", "response": {"output": "x = 1\n" * 80}}
        body["contents"].append({"role": "user", "parts": [{"functionResponse": answer}]})
    return body


def answer() -> ChatResult:
    args = json.dumps({"command": "grep -rn 'def add' ."})
    call = {"id": "call_1", "type": "function", "function": {"name": "Bash", "arguments": args}}
    message = {"role": "assistant", "content": "Let me look. " * 20, "tool_calls": [call]}
    return ChatResult(message, "tool_calls", list(range(1000)), list(range(80)), [-0.1] * 80)


def main() -> None:
    claude = json.loads((CAPTURES / "pi-anthropic-messages/002.json").read_text())["body"]
    gemini = json.loads((CAPTURES / "pi-google-generative-ai/002.json").read_text())["body"]
    res = answer()
    print(
        f"{'protocol':<10} {'tokens':>7} {'KiB':>6} {'msgs':>5} {'parse ms':>9} {'json ms':>8} {'sse ms':>7}"
    )
    for tokens in (1_000, 8_000, 32_000):
        for name, mod, body in (
            ("anthropic", am, grow_anthropic(claude, tokens)),
            ("google", gg, grow_google(gemini, tokens)),
        ):
            req = mod.parse_request(body, path_model="gw-model")
            parse = per_call_ms(lambda m=mod, b=body: m.parse_request(b, path_model="gw-model"))
            render = per_call_ms(
                lambda m=mod, r=req: m.render_response(r, res, response_id="msg_1")
            )
            sse = per_call_ms(
                lambda m=mod, r=req: b"".join(m.render_stream(r, res, response_id="msg_1"))
            )
            size = len(json.dumps(body)) / 1024
            print(
                f"{name:<10} {tokens:>7} {size:>6.0f} {len(req.messages):>5} {parse:>9.3f} {render:>8.3f} {sse:>7.3f}"
            )


if __name__ == "__main__":
    main()
