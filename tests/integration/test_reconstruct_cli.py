"""`polar reconstruct` end to end in a subprocess: real JSONL in, real Parquet out, a malformed
line reported as file:line while the other sessions are still reconstructed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq

EOT = 151645  # the CLI's default end-of-turn id


def row(cid: str, session: str, seq: int, prompt: list[int], resp: list[int]) -> str:
    lps = [-(seq + 1) / (i + 2) for i in range(len(resp))]
    return json.dumps(
        {
            "call_id": cid,
            "session_id": session,
            "seq": seq,
            "instance_id": f"{session}-task",
            "prompt_ids": prompt,
            "response_ids": resp,
            "response_logprobs": lps,
            "finish_reason": "stop",
        }
    )


def polar(argv: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*argv, "reconstruct", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_malformed_line_is_reported_and_other_sessions_reconstructed(
    tmp_path: Path, polar_argv: list[str]
) -> None:
    first = tmp_path / "run1.jsonl"
    first.write_text(
        "\n".join(
            [
                row("a1", "sa", 0, [1, 2], [3, EOT]),
                row("a2", "sa", 1, [1, 2, 3, EOT, 4], [5, EOT]),
                '{"call_id": "broken", "session_id": "sb", "seq": ',  # truncated write
            ]
        )
        + "\n"
    )
    second = tmp_path / "run2.jsonl"
    second.write_text(
        "\n".join([row("b1", "sb", 0, [7], [8, EOT]), row("c1", "sc", 0, [9], [10, EOT])]) + "\n"
    )
    out = tmp_path / "traces.parquet"
    proc = polar(polar_argv, str(first), str(second), "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"{first}:3: not valid JSON" in proc.stderr
    assert "merged_calls" in proc.stdout and "cut_boundaries" in proc.stdout

    table = pq.read_table(out)
    for column in (
        "trace_id",
        "session_id",
        "call_ids",
        "prompt_ids",
        "response_ids",
        "response_mask",
        "response_logprobs",
        "exact_context",
        "drift_boundaries",
        "num_calls",
        "instance_id",
    ):
        assert column in table.column_names, column
    rows = {r["session_id"]: r for r in table.to_pylist()}
    assert sorted(rows) == ["sa", "sb", "sc"]
    assert rows["sa"]["call_ids"] == ["a1", "a2"]
    assert rows["sa"]["response_ids"] == [3, EOT, 4, 5, EOT]
    assert rows["sa"]["response_mask"] == [1, 1, 0, 1, 1]
    assert rows["sa"]["response_logprobs"][2] == 0.0
    assert rows["sa"]["response_logprobs"][3] == -2 / 2
    assert rows["sa"]["instance_id"] == "sa-task"
    assert rows["sb"]["call_ids"] == ["b1"]


def test_per_request_mode_and_custom_eot(tmp_path: Path, polar_argv: list[str]) -> None:
    calls = tmp_path / "c.jsonl"
    calls.write_text(row("a1", "s", 0, [1], [2, 99]) + "\n" + row("a2", "s", 1, [1, 2, 99, 3], [4]))
    for mode, expected in (("per_request", 2), ("polar", 1)):
        out = tmp_path / f"{mode}.parquet"
        proc = polar(
            polar_argv,
            str(calls),
            "--mode",
            mode,
            "--eot-id",
            "99",
            "--out",
            str(out),
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        assert pq.read_table(out).num_rows == expected


def test_nothing_usable_exits_2_with_the_lines(tmp_path: Path, polar_argv: list[str]) -> None:
    calls = tmp_path / "c.jsonl"
    calls.write_text("garbage\n")
    proc = polar(polar_argv, str(calls), "--out", str(tmp_path / "t.parquet"), cwd=tmp_path)
    assert proc.returncode == 2
    assert f"{calls}:1" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "t.parquet").exists()


def test_unknown_mode_exits_2(tmp_path: Path, polar_argv: list[str]) -> None:
    calls = tmp_path / "c.jsonl"
    calls.write_text(row("a1", "s", 0, [1], [2, 99]) + "\n")
    proc = polar(polar_argv, str(calls), "--mode", "greedy", cwd=tmp_path)
    assert proc.returncode == 2 and "per_request, exact, polar" in proc.stderr
