"""Reading raw task rows from where they live: a Hugging Face dataset, a file, a directory.

Owns: resolving `tasks.source` (an existing path wins over a dataset name), reading JSONL,
JSON and Parquet files and directories of them, and loading a Hub dataset split through
`datasets` (imported lazily; offline mode honoured with an error that says what to do).
Out of scope: what a row means (rows.py), filters and duplicates (load.py).

A directory is read as every `*.jsonl`, `*.json` and `*.parquet` file under it (sorted, hidden
directories skipped); when some of those files are named for the split (`train.jsonl`,
`data/train-00000-of-00001.parquet`) only those are read. The demo layout (`recipes/tasks/`:
`tasks.jsonl` next to `repos/*.bundle`) is such a directory.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polar_cli.errors import InputError, SetupError

FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
_HF_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class RawRow:
    """One row as read, before normalisation. `data` is None when the row could not even be
    parsed (then `error` says why)."""

    index: int  # position in the whole source, 0-based
    origin: str  # "file.jsonl:12" or "hf:name[split]#12", for messages
    base_dir: Path | None  # relative snapshot paths resolve against this
    data: Any = None
    error: str = ""


def resolve_local(source: str, base_dir: Path | None) -> Path | None:
    """The local path `source` names, or None when there is no such file or directory."""
    path = Path(source).expanduser()
    candidates = [path] if path.is_absolute() else [(base_dir or Path.cwd()) / path, path]
    for cand in candidates:
        if cand.exists():
            return cand.resolve()
    return None


def read_source(source: str, split: str, base_dir: Path | None) -> list[RawRow]:
    """Every raw row of `source` (see the module docstring). InputError when it is neither an
    existing path nor a dataset name."""
    local = resolve_local(source, base_dir)
    if local is not None:
        files = _dir_files(local, split) if local.is_dir() else [local]
        rows: list[RawRow] = []
        for path in files:
            rows.extend(_read_file(path, start=len(rows)))
        return rows
    if _HF_NAME.match(source):
        return _read_hub(source, split)
    raise InputError(
        f"task source {source!r} is neither an existing file or directory nor a Hugging Face "
        "dataset name (owner/name): check the path (relative paths resolve against the recipe "
        "directory) or the dataset name"
    )


def _dir_files(root: Path, split: str) -> list[Path]:
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix in FILE_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    named = [p for p in files if p.stem == split or p.name.startswith(f"{split}-")]
    if named:
        files = named
    if not files:
        raise InputError(
            f"task directory {root} holds no {', '.join(FILE_SUFFIXES)} files: point "
            "tasks.source at a task file or a directory of them"
        )
    return files


def _read_file(path: Path, start: int) -> list[RawRow]:
    if path.suffix == ".jsonl":
        return _read_jsonl(path, start)
    if path.suffix == ".json":
        return _read_json(path, start)
    if path.suffix == ".parquet":
        return _read_parquet(path, start)
    raise InputError(
        f"task file {path} has an unknown type: use {', '.join(FILE_SUFFIXES)} (or a directory)"
    )


def _read_jsonl(path: Path, start: int) -> list[RawRow]:
    """One row per non-blank line; a line that is not JSON becomes a row with an error."""
    rows: list[RawRow] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            index, origin = start + len(rows), f"{path.name}:{lineno}"
            try:
                rows.append(RawRow(index, origin, path.parent, json.loads(line)))
            except json.JSONDecodeError as exc:
                rows.append(RawRow(index, origin, path.parent, error=f"not valid JSON: {exc}"))
    return rows


def _read_json(path: Path, start: int) -> list[RawRow]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"task file {path} is not valid JSON: {exc}") from None
    if isinstance(data, dict):
        # {"rows": [...]} / {"data": [...]} wrappers, or one task object.
        for key in ("rows", "data", "tasks"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
        else:
            data = [data]
    if not isinstance(data, list):
        raise InputError(f"task file {path} must hold a list of task objects")
    return [RawRow(start + i, f"{path.name}[{i}]", path.parent, row) for i, row in enumerate(data)]


def _read_parquet(path: Path, start: int) -> list[RawRow]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise InputError(f"task file {path} is not a readable Parquet file: {exc}") from None
    return [
        RawRow(start + i, f"{path.name}#{i}", path.parent, row)
        for i, row in enumerate(table.to_pylist())
    ]


def _read_hub(name: str, split: str) -> list[RawRow]:
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a dependency
        raise SetupError(
            "the `datasets` package is needed to load Hugging Face datasets: pip install datasets"
        ) from None
    offline = bool(getattr(datasets.config, "HF_HUB_OFFLINE", False))
    try:
        ds = datasets.load_dataset(name, split=split)
    except Exception as exc:  # network, missing dataset / split, offline cache miss
        if offline:
            raise InputError(
                f"dataset {name!r} (split {split!r}) is not in the local Hugging Face cache and "
                "offline mode is on (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE): load it once with "
                f"network access, or point tasks.source at a local file ({exc})"
            ) from None
        raise InputError(
            f"could not load dataset {name!r} split {split!r}: {exc}. Check the name and split "
            "(tasks.split), or use a local JSONL / Parquet file"
        ) from None
    return [RawRow(i, f"hf:{name}[{split}]#{i}", None, dict(row)) for i, row in enumerate(ds)]
