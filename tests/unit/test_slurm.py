"""The shipped sbatch scripts lint, and `polar slurm render` fills them from a recipe."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from polar_cli.pipeline.slurm import TEMPLATE_DIR, SlurmOptions, render
from polar_cli.recipe import load_recipe

SCRIPTS = sorted(TEMPLATE_DIR.glob("*.sbatch"))


def recipe_file(tmp_path: Path, inference: dict) -> Path:
    p = tmp_path / "r.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "name": "myrun",
                "inference": inference,
                "tasks": {"source": "x.jsonl"},
                "output": {"dir": "runs/myrun"},
            }
        )
    )
    return p


SGL = {"kind": "sglang", "model_path": "Qwen/Qwen3.5-122B-A10B", "tp_size": 8}


def directives(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH --"):
            k, _, v = line[len("#SBATCH --") :].partition("=")
            out[k] = v
    return out


def lint(text: str, tmp_path: Path, name: str) -> None:
    p = tmp_path / name
    p.write_text(text)
    r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    if shutil.which("shellcheck"):
        r = subprocess.run(["shellcheck", str(p)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout


def test_shipped_scripts_exist() -> None:
    assert {p.name for p in SCRIPTS} >= {"generate.sbatch", "generate-array.sbatch"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shipped_scripts_pass_bash_n_and_shellcheck(script: Path, tmp_path: Path) -> None:
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck not installed (.ci/run installs it)")
    lint(script.read_text(), tmp_path, script.name)


def test_render_one_node(tmp_path: Path) -> None:
    path = recipe_file(tmp_path, SGL)
    text = render(
        load_recipe(path), str(path), SlurmOptions(nodes=1, partition="gpu", time="4:00:00")
    )
    d = directives(text)
    assert d["job-name"] == "myrun" and d["gpus-per-node"] == "8"
    assert d["partition"] == "gpu" and d["time"] == "4:00:00"
    assert "array" not in d and "account" not in d
    assert f'RECIPE="${{POLAR_RECIPE:-{path}}}"' in text
    assert 'OUT="${POLAR_OUT:-runs/myrun}"' in text
    lint(text, tmp_path, "one.sbatch")


def test_render_array_and_scripted_has_no_gpu(tmp_path: Path) -> None:
    path = recipe_file(tmp_path, {"kind": "scripted"})
    text = render(load_recipe(path), str(path), SlurmOptions(nodes=4, account="proj"))
    d = directives(text)
    assert d["array"] == "0-3" and d["account"] == "proj"
    assert "gpus-per-node" not in d
    assert '--shard "$SHARD"' in text
    lint(text, tmp_path, "array.sbatch")


def test_cli_render(tmp_path: Path, polar_argv: list[str]) -> None:
    path = recipe_file(tmp_path, SGL)
    r = subprocess.run(
        [*polar_argv, "slurm", "render", "--recipe", str(path), "--nodes", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert directives(r.stdout)["array"] == "0-1"
