"""`polar slurm render`: fill the shipped sbatch templates from a recipe.

Owns: choosing the template (one node -> generate.sbatch, N nodes -> a job array of N shards),
setting its #SBATCH directives (job name, GPUs from the recipe's inference section, time,
partition, account, array range) and its recipe / output defaults. Out of scope: submitting
(users run `sbatch`; Slurm is the scheduler across nodes, never a home-made one).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from polar_cli.errors import RecipeError
from polar_cli.recipe.schema import Recipe, SGLangInference

TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "recipes" / "slurm"
_DIRECTIVE = re.compile(r"^#SBATCH --([a-z-]+)(?:=(.*))?$")


@dataclass(frozen=True)
class SlurmOptions:
    nodes: int = 1
    partition: str | None = None
    time: str | None = None  # e.g. 24:00:00
    account: str | None = None
    job_name: str | None = None


def _gpus(recipe: Recipe) -> int | None:
    inf = recipe.inference
    if isinstance(inf, SGLangInference):
        return inf.gpus_per_node or inf.tp_size
    return None  # external / scripted: the job needs no GPU of its own


def render(
    recipe: Recipe, recipe_path: str, opts: SlurmOptions, template_dir: Path = TEMPLATE_DIR
) -> str:
    if opts.nodes < 1:
        raise RecipeError("--nodes must be >= 1")
    name = "generate.sbatch" if opts.nodes == 1 else "generate-array.sbatch"
    path = template_dir / name
    try:
        text = path.read_text()
    except OSError as exc:
        raise RecipeError(f"cannot read Slurm template {path}: {exc.strerror}") from None
    want: dict[str, str | None] = {"job-name": opts.job_name or recipe.name}
    gpus = _gpus(recipe)
    want["gpus-per-node"] = str(gpus) if gpus else None
    if opts.time:
        want["time"] = opts.time
    if opts.partition:
        want["partition"] = opts.partition
    if opts.account:
        want["account"] = opts.account
    if opts.nodes > 1:
        want["array"] = f"0-{opts.nodes - 1}"

    out: list[str] = []
    seen: set[str] = set()
    last_directive = -1
    for line in text.splitlines():
        m = _DIRECTIVE.match(line)
        if m and m.group(1) in want:
            key = m.group(1)
            seen.add(key)
            if want[key] is None:
                continue  # e.g. no GPUs for a scripted / external backend
            line = f"#SBATCH --{key}={want[key]}"
        out.append(line)
        if line.startswith("#SBATCH"):
            last_directive = len(out) - 1
    extra = [f"#SBATCH --{k}={v}" for k, v in want.items() if k not in seen and v is not None]
    out[last_directive + 1 : last_directive + 1] = extra
    rendered = "\n".join(out) + "\n"
    # the defaults the script falls back to: this recipe and this recipe's output dir
    rendered = rendered.replace(
        'RECIPE="${POLAR_RECIPE:-recipes/pi-swegym-qwen35-122b.yaml}"',
        f'RECIPE="${{POLAR_RECIPE:-{_q(recipe_path)}}}"',
    )
    rendered = rendered.replace(
        'OUT="${POLAR_OUT:-runs/${SLURM_JOB_NAME:-polar-generate}}"',
        f'OUT="${{POLAR_OUT:-{_q(recipe.output.dir)}}}"',
    )
    return rendered


def _q(value: str) -> str:
    """Quote for use inside "${VAR:-...}" (no spaces / specials expected; refuse odd ones)."""
    if shlex.quote(value) != value:
        raise RecipeError(f"path {value!r} has characters a Slurm script cannot take unquoted")
    return value
