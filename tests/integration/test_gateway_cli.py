"""`polar gateway` as a process: it starts the recipe's backend and the gateway, answers, and
SIGTERM stops both cleanly (exit 0, the port closed, the capture flushed)."""

from __future__ import annotations

import json
import signal
import socket
import urllib.request
from pathlib import Path

from support import polar_gateway


def test_sigterm_stops_gateway_and_backend(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "inference: {kind: scripted, policies: {noop: 1.0}}\n"
        f"tasks: {{source: {tmp_path / 'none.jsonl'}}}\noutput: {{dir: {tmp_path / 'run'}}}\n"
    )
    log = tmp_path / "gw.log"
    with polar_gateway(recipe, tmp_path / "cap", ["sk-cli=inst-1"], log) as (proc, base):
        port = int(base.rsplit(":", 1)[1])
        req = urllib.request.Request(
            base + "/v1/chat/completions",
            data=json.dumps(
                {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            ).encode(),
            headers={"Authorization": "Bearer sk-cli", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            answer = json.loads(r.read())
        assert answer["model"] == "m" and answer["choices"][0]["message"]["content"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
    assert "session sk-cli: 1 calls" in log.read_text()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # nothing listens any more
    (line,) = (tmp_path / "cap" / "sk-cli" / "completions.jsonl").read_text().splitlines()
    rec = json.loads(line)
    assert rec["instance_id"] == "inst-1" and rec["session_id"] == "sk-cli"
    assert len(rec["response_ids"]) == len(rec["response_logprobs"]) > 0
