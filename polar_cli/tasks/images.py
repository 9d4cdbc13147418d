"""Container image names for task rows: the dataset's documented naming rule or a template.

Owns: telling the supported datasets apart (`Dataset`, `detect_dataset`), each dataset's image
naming rule, and rendering a recipe's `image_template`.
Out of scope: pulling / converting images (runtime/apptainer), reading rows (sources.py).

How the datasets are told apart, first match wins:
1. the source name (a HF dataset name or file path) containing `swe-rebench`, `skyrl`, `swe-gym`
   or `swe-bench` (case-insensitive; `_` and `-` alike);
2. the row: an `instance` column (SkyRL-v0-293 wraps the SWE-Gym record) -> SWE-Gym;
   `install_config` or `docker_image` -> SWE-rebench; `environment_setup_commit` -> SWE-bench;
   FAIL_TO_PASS stored as a real list (not a JSON string) -> SWE-Gym;
3. otherwise SWE-bench.
A row with a `snapshot` (the bundled demo tasks) needs no image; it gets one only from its own
`image` field or the template.
"""

from __future__ import annotations

import re
import string
from enum import StrEnum
from typing import Any

from polar_cli.errors import RecipeError


class Dataset(StrEnum):
    """The row shapes (and image naming rules) the loader knows."""

    SWE_BENCH = "swe-bench"  # princeton-nlp/SWE-bench, SWE-bench_Verified, SWE-bench/...
    SWE_GYM = "swe-gym"  # SWE-Gym/SWE-Gym and NovaSky-AI/SkyRL-v0-293-data
    SWE_REBENCH = "swe-rebench"  # nebius/SWE-rebench


_NAME_HINTS = (
    ("swe-rebench", Dataset.SWE_REBENCH),
    ("skyrl", Dataset.SWE_GYM),
    ("swe-gym", Dataset.SWE_GYM),
    ("swe-bench", Dataset.SWE_BENCH),
)

TEMPLATE_FIELDS = ("instance_id", "repo", "owner", "name", "version", "id_lower", "docker_id")


def dataset_from_name(source: str) -> Dataset | None:
    """The dataset a source name points at, or None when the name says nothing."""
    key = source.lower().replace("_", "-")
    for hint, dataset in _NAME_HINTS:
        if hint in key:
            return dataset
    return None


def detect_dataset(row: dict[str, Any], hint: Dataset | None) -> Dataset:
    """The dataset of one raw row (see the module docstring for the rules)."""
    if hint is not None:
        return hint
    if "instance" in row:
        return Dataset.SWE_GYM
    if "install_config" in row or "docker_image" in row:
        return Dataset.SWE_REBENCH
    if "environment_setup_commit" in row:
        return Dataset.SWE_BENCH
    if isinstance(row.get("FAIL_TO_PASS"), list):
        return Dataset.SWE_GYM
    return Dataset.SWE_BENCH


def default_image(dataset: Dataset, instance_id: str) -> str:
    """The documented image name for an instance of `dataset`.

    SWE-bench: `swebench/sweb.eval.x86_64.<id, "__" -> "_1776_">:latest` (lower-case);
    SWE-Gym / SkyRL: `xingyaoww/sweb.eval.x86_64.<id, "__" -> "_s_">:latest` (lower-case);
    SWE-rebench: `swerebench/sweb.eval.x86_64.<owner>_1776_<repo>-<n>` (lower-case).
    """
    if dataset is Dataset.SWE_GYM:
        return f"xingyaoww/sweb.eval.x86_64.{instance_id.replace('__', '_s_')}:latest".lower()
    if dataset is Dataset.SWE_REBENCH:
        return f"swerebench/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}".lower()
    return f"swebench/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}:latest".lower()


def check_template(template: str) -> None:
    """RecipeError unless every `{field}` in `template` is one this module fills in."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise RecipeError(f"tasks.image_template {template!r}: {exc}") from None
    unknown = sorted({f for f in fields if f not in TEMPLATE_FIELDS})
    if unknown or any(f == "" for f in fields):
        raise RecipeError(
            f"tasks.image_template {template!r} uses unknown field(s) "
            f"{', '.join(unknown) or '{}'}: valid fields are "
            + ", ".join("{" + f + "}" for f in TEMPLATE_FIELDS)
        )


def render_template(template: str, *, instance_id: str, repo: str, version: str) -> str:
    """Fill a (checked) image template for one task."""
    owner, _, name = repo.partition("/")
    return template.format(
        instance_id=instance_id,
        repo=repo,
        owner=owner,
        name=name,
        version=version,
        id_lower=instance_id.lower(),
        docker_id=re.sub(r"__", "_1776_", instance_id).lower(),
    )
