"""`datasets.load_dataset(OUT, "traces" | "sessions")` loads a written run directory offline,
including when a split is tiny or empty."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from polar_cli.dataset.synthetic import synthetic_run
from polar_cli.dataset.writer import write_dataset
from polar_cli.recipe.schema import OutputConfig
from polar_cli.records import Outcome

datasets = pytest.importorskip("datasets")


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert os.environ["HF_DATASETS_OFFLINE"] == "1"


def _load(out: Path, config: str, cache: Path):  # type: ignore[no-untyped-def]
    return datasets.load_dataset(str(out), config, cache_dir=str(cache))


def _write(out: Path, run, **cfg):  # type: ignore[no-untyped-def]
    return write_dataset(
        out, run.results, run.traces, run.completions, cfg=OutputConfig(**cfg), recipe_name="t"
    )


def test_both_configs_load_with_train_and_test(tmp_path: Path) -> None:
    run = synthetic_run(repos=3, instances_per_repo=10, samples=2, seed=5)
    summary = _write(tmp_path / "out", run, test_fraction=0.2, shard_max_rows=4)
    for config in ("traces", "sessions"):
        ds = _load(tmp_path / "out", config, tmp_path / "cache")
        assert sorted(ds) == ["test", "train"]
        for split in ("train", "test"):
            assert ds[split].num_rows == summary.rows[config][split]
            assert set(ds[split]["split"]) == {split}
    sessions = _load(tmp_path / "out", "sessions", tmp_path / "cache")["train"]
    row = sessions[0]
    assert row["messages"][-1]["role"] == "assistant"  # the final assistant turn is included
    assert row["num_messages"] == len(row["messages"])
    calls = [m["tool_calls"] for m in row["messages"] if m["tool_calls"]]
    assert all(isinstance(c[0]["function"]["arguments"], str) for c in calls)
    traces = _load(tmp_path / "out", "traces", tmp_path / "cache")["train"]
    t = traces[0]
    assert len(t["response_ids"]) == len(t["response_mask"]) == len(t["response_logprobs"])


def test_tiny_test_split_and_no_test_split(tmp_path: Path) -> None:
    run = synthetic_run(repos=1, instances_per_repo=30, samples=1, seed=2)
    accepted = {r.instance_id for r in run.results if r.outcome == Outcome.ACCEPTED}
    assert 5 <= len(accepted) < 15  # so 0.1 rounds to exactly one test instance
    _write(tmp_path / "tiny", run, test_fraction=0.1)
    ds = _load(tmp_path / "tiny", "sessions", tmp_path / "cache")
    assert len(set(ds["test"]["instance_id"])) == 1
    _write(tmp_path / "none", run, test_fraction=0.0)
    for config in ("traces", "sessions"):
        ds = _load(tmp_path / "none", config, tmp_path / "cache")
        assert list(ds) == ["train"]  # the empty test split is not declared


def test_a_run_without_accepted_sessions_fails_to_load_clearly(tmp_path: Path) -> None:
    """`datasets` cannot load a config without rows; such a card declares none (and says so)."""
    run = synthetic_run()
    rejected = [r for r in run.results if r.outcome != Outcome.ACCEPTED]
    write_dataset(tmp_path / "out", rejected, {}, {}, cfg=OutputConfig(), recipe_name="t")
    with pytest.raises(ValueError, match="traces"):
        _load(tmp_path / "out", "traces", tmp_path / "cache")


def test_same_directory_name_or_a_rewrite_never_loads_stale_rows(tmp_path: Path) -> None:
    """datasets keys its cache of a local directory by name + card metadata, not by files: the
    card's dataset_info sizes must make two runs named `run` (or a rewrite) load their own rows."""
    cache = tmp_path / "cache"
    for i, seed in enumerate((1, 2, 3)):
        out = tmp_path / f"p{i}" / "run"
        summary = _write(out, synthetic_run(seed=seed))
        ds = _load(out, "traces", cache)
        assert {k: v.num_rows for k, v in ds.items()} == dict(summary.rows["traces"])
    out = tmp_path / "p0" / "run"
    summary = _write(out, synthetic_run(seed=7))  # a resume rewrote the shards
    ds = _load(out, "sessions", cache)
    assert {k: v.num_rows for k, v in ds.items()} == dict(summary.rows["sessions"])
