"""Benchmark: ledger appends (fsync) and the dataset write (split + shards + card + stats).

Prints figures; asserts nothing (speed is not part of the pass/fail suite). Run with
`python tests/bench/bench_dataset.py [--sessions N] [--tokens T]`.
"""

from __future__ import annotations

import argparse
import random
import resource
import tempfile
import time
from pathlib import Path

from polar_cli.dataset.stats import LedgerEntry
from polar_cli.dataset.writer import write_dataset
from polar_cli.pipeline.ledger import Ledger
from polar_cli.recipe.schema import OutputConfig
from polar_cli.records import Completion, SessionResult, Trace


def _session(
    i: int, tokens: int, rng: random.Random
) -> tuple[SessionResult, list[Trace], list[Completion]]:
    sid, inst, repo = f"s{i:06d}", f"repo{i % 20}__{i // 3}", f"org/repo{i % 20}"
    prompt = [rng.randrange(150_000) for _ in range(tokens)]
    response = [rng.randrange(150_000) for _ in range(tokens // 4)]
    trace = Trace(
        trace_id=f"{sid}:c0",
        session_id=sid,
        call_ids=["c0"],
        prompt_ids=prompt,
        response_ids=response,
        response_mask=[1] * len(response),
        response_logprobs=[-0.1] * len(response),
        num_calls=1,
        exact_context=True,
        drift_boundaries=0,
        instance_id=inst,
        repo=repo,
        reward=1.0,
        outcome="accepted",
    )
    comp = Completion(
        call_id="c0",
        session_id=sid,
        seq=0,
        prompt_ids=prompt,
        response_ids=response,
        response_logprobs=[-0.1] * len(response),
        messages=[{"role": "user", "content": "fix it"}],
        response_message={"role": "assistant", "content": "done"},
    )
    result = SessionResult(
        sid,
        inst,
        repo,
        "accepted",
        started_at=1.0 + i,
        finished_at=2.0 + i,
        num_calls=1,
        num_traces=1,
        sampled_tokens=len(response),
    )
    return result, [trace], [comp]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--tokens", type=int, default=4000, help="prompt tokens per trace")
    args = ap.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        sessions = [_session(i, args.tokens, rng) for i in range(args.sessions)]
        t0 = time.perf_counter()
        with Ledger(out / "ledger.jsonl") as ledger:
            for result, _, _ in sessions:
                ledger.append(result)
        t_ledger = time.perf_counter() - t0
        print(
            f"ledger: {args.sessions} fsynced appends in {t_ledger:.2f} s "
            f"({args.sessions / t_ledger:,.0f} rows/s)"
        )
        t0 = time.perf_counter()
        entries = Ledger(out / "ledger.jsonl").entries()
        print(f"ledger: read {len(entries)} rows in {time.perf_counter() - t0:.3f} s")
        traces = {r.session_id: t for r, t, _ in sessions}
        comps = {r.session_id: c for r, _, c in sessions}
        t0 = time.perf_counter()
        summary = write_dataset(
            out,
            [LedgerEntry(r) for r, _, _ in sessions],
            traces,
            comps,
            cfg=OutputConfig(shard_max_rows=500),
            recipe_name="bench",
        )
        t_write = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in (out / "data").rglob("*.parquet"))
        tokens = args.sessions * (args.tokens + args.tokens // 4)
        print(
            f"dataset: {args.sessions} sessions ({tokens / 1e6:.1f} M tokens) -> "
            f"{len(summary.files) - 2} shards, {size / 1e6:.1f} MB in {t_write:.2f} s "
            f"({tokens / t_write / 1e6:.1f} M tokens/s)"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak:.0f} MB (includes the Python-object fixtures)")


if __name__ == "__main__":
    main()
