"""Shared helpers for the `polar generate` end-to-end tests: run the CLI, read a run directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = REPO_ROOT / "recipes" / "demo.yaml"
GENERATE_TIMEOUT_S = 900


def generate_argv(recipe: Path, out: Path, *sets: str, extra: tuple[str, ...] = ()) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "polar_cli.cli",
        "generate",
        "--recipe",
        str(recipe),
        "--out",
        str(out),
        "--plain",
        *extra,
    ]
    for s in sets:
        argv += ["--set", s]
    return argv


def run_generate(
    recipe: Path, out: Path, *sets: str, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        generate_argv(recipe, out, *sets, extra=extra),
        capture_output=True,
        text=True,
        timeout=GENERATE_TIMEOUT_S,
        cwd=REPO_ROOT,
    )


def ledger_rows(out: Path) -> list[dict[str, Any]]:
    path = out / "ledger.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_bytes().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a torn last line after kill -9
    return rows


def parquet_rows(out: Path, config: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for f in sorted((out / "data" / config).glob("*.parquet")):
        rows += pq.read_table(f).to_pylist()
    return rows


def stats(out: Path) -> dict[str, Any]:
    return json.loads((out / "stats.json").read_text())
