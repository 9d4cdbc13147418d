"""Normalising one raw dataset row into a `Task`, or saying which field is at fault.

Owns: the per-field rules for SWE-bench, SWE-bench Verified, SWE-Gym, SWE-rebench and
SkyRL-v0-293 rows (FAIL_TO_PASS / PASS_TO_PASS as JSON strings or lists; SWE-rebench's
`install_config` {test_cmd, log_parser}; SkyRL's `instance` column holding the SWE-Gym record),
resolving a demo task's relative `snapshot`, and choosing the row's image.
Out of scope: reading files / the Hub (sources.py), duplicates and filters (load.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polar_cli.records import Task
from polar_cli.tasks.images import Dataset, default_image, detect_dataset, render_template


class RowError(ValueError):
    """One row cannot become a Task: `field` is at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class RowContext:
    """What the normaliser needs besides the row itself."""

    dataset_hint: Dataset | None  # from the source name, if it says
    base_dir: Path | None  # relative snapshots resolve against this (the task file's dir)
    image_template: str | None  # checked already (images.check_template)


def _maybe_json(value: Any, field: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise RowError(field, f"not valid JSON ({exc.msg} at char {exc.pos})") from None
    return value


def unwrap(row: Any) -> dict[str, Any]:
    """The record inside a raw row: SkyRL's `instance` column (a dict or JSON string) holds the
    SWE-Gym record; every other shape is the record itself."""
    if not isinstance(row, dict):
        raise RowError("<row>", f"expected an object, got {type(row).__name__}")
    if "instance" in row and "instance_id" not in row:
        inner = _maybe_json(row["instance"], "instance")
        if not isinstance(inner, dict):
            raise RowError("instance", f"expected the SWE-Gym record, got {type(inner).__name__}")
        return inner
    return row


def _str(row: dict[str, Any], field: str, *, required: bool, nonempty: bool = False) -> str:
    value = row.get(field)
    if value is None:
        if required:
            raise RowError(field, "missing")
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and field == "version":
        return str(value)
    if not isinstance(value, str):
        raise RowError(field, f"expected a string, got {type(value).__name__}")
    if nonempty and not value.strip():
        raise RowError(field, "empty")
    return value


def test_ids(row: dict[str, Any], field: str, *, required: bool) -> tuple[str, ...]:
    """FAIL_TO_PASS / PASS_TO_PASS as a tuple of test ids; the value may be a list or a JSON
    string holding one (SWE-bench stores strings, SWE-Gym real lists)."""
    value = row.get(field)
    if value is None:
        if required:
            raise RowError(field, "missing")
        return ()
    value = _maybe_json(value, field)
    if hasattr(value, "tolist"):  # a numpy array from a pandas-backed reader
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
        raise RowError(field, "expected a list of test ids (or a JSON string of one)")
    if required and not value:
        raise RowError(field, "empty: a task needs at least one FAIL_TO_PASS test to grade")
    return tuple(value)


def _install_config(row: dict[str, Any]) -> dict[str, Any]:
    value = _maybe_json(row.get("install_config"), "install_config")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RowError("install_config", f"expected an object, got {type(value).__name__}")
    return value


def _test_cmd(row: dict[str, Any], install: dict[str, Any]) -> str | None:
    field, value = "test_cmd", row.get("test_cmd")
    if value is None:
        field, value = "install_config.test_cmd", install.get("test_cmd")
    if value is None or value == "":
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return " && ".join(value)
    if not isinstance(value, str):
        raise RowError(field, f"expected a string, got {type(value).__name__}")
    return value


def _snapshot(row: dict[str, Any], base_dir: Path | None) -> str | None:
    value = row.get("snapshot")
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise RowError("snapshot", f"expected a path string, got {type(value).__name__}")
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = (base_dir or Path.cwd()) / path
    path = path.resolve()
    if not path.exists():
        raise RowError("snapshot", f"{path} does not exist (a git bundle or repository dir)")
    return str(path)


def normalise(raw: Any, index: int, ctx: RowContext) -> Task:
    """One raw row -> Task; RowError naming the field at fault otherwise."""
    row = unwrap(raw)
    # A row that was unwrapped from SkyRL's `instance` column is detected on the outer row.
    dataset = detect_dataset(raw, ctx.dataset_hint)
    instance_id = _str(row, "instance_id", required=True, nonempty=True)
    repo = _str(row, "repo", required=True, nonempty=True)
    if "/" not in repo.strip("/"):
        raise RowError("repo", f"expected 'owner/name', got {repo!r}")
    install = _install_config(row)
    version = _str(row, "version", required=False)
    snapshot = _snapshot(row, ctx.base_dir)
    image = _str(row, "image", required=False) or _str(row, "docker_image", required=False)
    if not image and ctx.image_template:
        image = render_template(
            ctx.image_template, instance_id=instance_id, repo=repo, version=version
        )
    if not image and snapshot is None:
        image = default_image(dataset, instance_id)
    log_parser = _str(row, "log_parser", required=False) or install.get("log_parser") or None
    if log_parser is not None and not isinstance(log_parser, str):
        raise RowError("install_config.log_parser", "expected a parser name string")
    return Task(
        instance_id=instance_id,
        repo=repo,
        base_commit=_str(row, "base_commit", required=True, nonempty=True),
        problem_statement=_str(row, "problem_statement", required=True, nonempty=True),
        test_patch=_str(row, "test_patch", required=True),
        fail_to_pass=test_ids(row, "FAIL_TO_PASS", required=True),
        pass_to_pass=test_ids(row, "PASS_TO_PASS", required=False),
        patch=_str(row, "patch", required=False),
        image=image or None,
        test_cmd=_test_cmd(row, install),
        log_parser=log_parser,
        snapshot=snapshot,
        hints_text=_str(row, "hints_text", required=False),
        version=version,
        source_index=index,
    )
