"""The committed demo task set is exactly what its generator builds from recipes/tasks/src/:
same rows (commit ids, patches, FAIL_TO_PASS / PASS_TO_PASS) and same bundle heads. Guards
against editing a source tree or tasks.yaml without rebuilding (python recipes/tasks/build.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "recipes" / "tasks"


def heads(bundle: Path) -> str:
    return subprocess.run(
        ["git", "bundle", "list-heads", str(bundle)],
        capture_output=True,
        text=True,
        check=True,
        env={"GIT_CONFIG_GLOBAL": "/dev/null", "PATH": "/usr/bin:/bin"},
    ).stdout


@pytest.mark.slow
def test_build_reproduces_the_committed_task_set(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(DEMO / "build.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "tasks.jsonl").read_text() == (DEMO / "tasks.jsonl").read_text()
    built = sorted(p.name for p in (tmp_path / "repos").iterdir())
    assert built == sorted(p.name for p in (DEMO / "repos").iterdir())
    for name in built:
        assert heads(tmp_path / "repos" / name) == heads(DEMO / "repos" / name)
