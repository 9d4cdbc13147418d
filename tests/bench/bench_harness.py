"""Benchmark: one oracle session per real harness, under the local runtime (bubblewrap), through
the real gateway and the scripted stand-in model. Prints, per harness: wall time of
Harness.run, model calls, time spent inside model calls, and the harness's own time around them
(startup, tool execution, shutdown), plus the installed tree's size.

Run: python tests/bench/bench_harness.py [pi codex claude_code qwen_code gemini_cli]
Harness trees come from POLAR_HARNESS_CACHE (default ~/.cache/polar/harness; installed if absent).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from polar_cli.gateway import Gateway
from polar_cli.harness import ADAPTERS, get_harness
from polar_cli.harness.base import GatewayEndpoint
from polar_cli.inference import open_backend
from polar_cli.recipe.schema import HarnessConfig, LocalRuntime, ScriptedInference
from polar_cli.records import Task
from polar_cli.runtime import RuntimeSpec, open_runtime

CACHE = Path(os.environ.get("POLAR_HARNESS_CACHE", "~/.cache/polar/harness")).expanduser()


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    )
    return out.stdout


def tiny_task(root: Path) -> Task:
    src = root / "src"
    src.mkdir(parents=True)
    (src / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    git(src, "init", "-q")
    git(src, "add", ".")
    git(src, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    base = git(src, "rev-parse", "HEAD").strip()
    (src / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    gold = git(src, "diff")
    git(src, "checkout", "-q", "--", ".")
    return Task(
        "tiny__calc-1", "tiny/calc", base, "add() subtracts. Fix it.", patch=gold, snapshot=str(src)
    )


def tree_mb(path: Path) -> float:
    out = subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[0])


async def one(kind: str, root: Path) -> dict[str, object]:
    task = tiny_task(root / "task")
    harness = get_harness(HarnessConfig(kind=kind))  # type: ignore[arg-type]
    t0 = time.monotonic()
    tree = await harness.install(CACHE)
    install_s = time.monotonic() - t0
    capture = root / "completions.jsonl"
    inference = ScriptedInference(policies={"oracle": 1.0}, context_length=262144)
    async with (
        open_backend(inference, run_dir=root / "run", tasks=[task]) as backend,
        Gateway(backend) as gw,
    ):
        key = gw.register_session(
            "b", instance_id=task.instance_id, harness=kind, capture_path=capture
        )
        ep = GatewayEndpoint(gw.base_url, key, "polar-model")
        spec = RuntimeSpec("b", task, root / "agent", harness_dir=tree)
        async with open_runtime(LocalRuntime(), spec) as rt:
            run = await harness.run(rt, task, ep, timeout_s=600, log_path=root / "harness.log")
    rows = [json.loads(x) for x in capture.read_text().splitlines()] if capture.exists() else []
    model_s = sum(r["finished_at"] - r["started_at"] for r in rows)
    return {
        "harness": kind,
        "status": run.status,
        "run_s": round(run.duration_s, 2),
        "calls": len(rows),
        "model_s": round(model_s, 2),
        "harness_s": round(run.duration_s - model_s, 2),
        "prompt_tokens_last": len(rows[-1]["prompt_ids"]) if rows else 0,
        "install_or_lookup_s": round(install_s, 3),
        "tree_mb": tree_mb(tree),
    }


def main() -> None:
    kinds = sys.argv[1:] or list(ADAPTERS)
    print(f"{'harness':<12} {'status':<8} {'run_s':>7} {'calls':>5} {'model_s':>8} "
          f"{'harness_s':>9} {'last_prompt':>11} {'install_s':>9} {'tree_mb':>8}")  # fmt: skip
    for kind in kinds:
        with tempfile.TemporaryDirectory(prefix=f"polar-bench-{kind}-") as tmp:
            r = asyncio.run(one(kind, Path(tmp)))
        print(f"{r['harness']:<12} {r['status']:<8} {r['run_s']:>7} {r['calls']:>5} "
              f"{r['model_s']:>8} {r['harness_s']:>9} {r['prompt_tokens_last']:>11} "
              f"{r['install_or_lookup_s']:>9} {r['tree_mb']:>8}")  # fmt: skip


if __name__ == "__main__":
    main()
