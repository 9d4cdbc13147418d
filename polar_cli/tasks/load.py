"""`load_tasks`: a recipe's `tasks` section -> the validated, filtered list of Tasks.

Owns: turning raw rows into Tasks while collecting one `TaskProblem` per bad row (the row is
skipped, the run goes on), the duplicate-id check (an error: which row is meant is ambiguous),
and the filters (instance ids, repositories, a seeded sample, a limit; applied in that order).
Out of scope: reading the source (sources.py), per-field rules (rows.py), images (images.py).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from polar_cli.errors import InputError
from polar_cli.recipe.schema import TasksConfig
from polar_cli.records import Task
from polar_cli.tasks.images import check_template, dataset_from_name
from polar_cli.tasks.rows import RowContext, RowError, normalise
from polar_cli.tasks.sources import RawRow, read_source


@dataclass(frozen=True)
class TaskProblem:
    """A row that was skipped, and why."""

    index: int  # row position in the source, 0-based
    instance_id: str  # "" when the row has none
    field: str  # the field at fault ("FAIL_TO_PASS", "install_config.test_cmd", "<row>", ...)
    message: str
    origin: str = ""  # "tasks.jsonl:3", for multi-file sources

    def __str__(self) -> str:
        who = f"row {self.index}" if self.index >= 0 else "filter"
        who += f" ({self.instance_id})" if self.instance_id else ""
        where = f" [{self.origin}]" if self.origin else ""
        return f"{who}{where}: {self.field}: {self.message}"


@dataclass(frozen=True)
class TaskSet:
    """The loaded tasks (filters applied) and every problem met on the way."""

    tasks: list[Task]
    problems: list[TaskProblem] = field(default_factory=list)
    total_rows: int = 0  # rows read from the source, before validation and filters

    def repo_counts(self) -> dict[str, int]:
        """Tasks per repository, most first."""
        return dict(Counter(t.repo for t in self.tasks).most_common())


def _instance_id_of(raw: RawRow) -> str:
    data = raw.data
    if isinstance(data, dict):
        value = data.get("instance_id")
        if value is None and isinstance(data.get("instance"), dict):
            value = data["instance"].get("instance_id")
        if isinstance(value, str):
            return value
    return ""


def _check_duplicates(tasks: list[Task], origins: dict[int, str]) -> None:
    first: dict[str, Task] = {}
    clashes: list[str] = []
    for task in tasks:
        seen = first.setdefault(task.instance_id, task)
        if seen is not task:
            clashes.append(
                f"{task.instance_id}: row {seen.source_index} ({origins[seen.source_index]}) "
                f"and row {task.source_index} ({origins[task.source_index]})"
            )
    if clashes:
        raise InputError(
            f"duplicate instance ids in the task source ({len(clashes)}): each instance_id "
            "must appear once; remove or rename the repeated rows",
            clashes,
        )


def _filter(tasks: list[Task], cfg: TasksConfig, problems: list[TaskProblem]) -> list[Task]:
    if cfg.instance_ids:
        wanted = set(cfg.instance_ids)
        known = {t.instance_id for t in tasks}
        for missing in sorted(wanted - known):
            problems.append(
                TaskProblem(-1, missing, "tasks.instance_ids", "not found in the source")
            )
        tasks = [t for t in tasks if t.instance_id in wanted]
    if cfg.repos:
        repos = set(cfg.repos)
        tasks = [t for t in tasks if t.repo in repos]
    if cfg.sample is not None and cfg.sample < len(tasks):
        picked = set(random.Random(cfg.seed).sample(range(len(tasks)), cfg.sample))
        tasks = [t for i, t in enumerate(tasks) if i in picked]  # keep source order
    if cfg.limit is not None:
        tasks = tasks[: cfg.limit]
    return tasks


def load_tasks(cfg: TasksConfig, *, base_dir: Path | None = None) -> TaskSet:
    """Load, validate and filter the tasks `cfg` names.

    `base_dir` is where a relative `cfg.source` is looked for first (the recipe's directory);
    relative snapshot paths inside a task file resolve against that file's directory.
    Bad rows become `problems` and are skipped; duplicate instance ids raise InputError naming
    both rows; an unreadable source raises InputError / SetupError.
    """
    if cfg.image_template:
        check_template(cfg.image_template)
    raws = read_source(cfg.source, cfg.split, base_dir)
    ctx_hint = dataset_from_name(cfg.source)
    tasks: list[Task] = []
    problems: list[TaskProblem] = []
    origins: dict[int, str] = {}
    for raw in raws:
        origins[raw.index] = raw.origin
        if raw.data is None:
            problems.append(TaskProblem(raw.index, "", "<row>", raw.error, raw.origin))
            continue
        ctx = RowContext(ctx_hint, raw.base_dir, cfg.image_template)
        try:
            tasks.append(normalise(raw.data, raw.index, ctx))
        except RowError as exc:
            problems.append(
                TaskProblem(raw.index, _instance_id_of(raw), exc.field, exc.message, raw.origin)
            )
    _check_duplicates(tasks, origins)
    return TaskSet(tasks=_filter(tasks, cfg, problems), problems=problems, total_rows=len(raws))


def tasks_config(source: str, **overrides: object) -> TasksConfig:
    """A TasksConfig for a bare source (the `polar tasks check` / `polar verify` commands)."""
    return TasksConfig(source=source, **overrides)  # type: ignore[arg-type]
