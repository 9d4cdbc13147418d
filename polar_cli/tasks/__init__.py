"""tasks: SWE-style task loading, validation and image naming (see DESIGN.md).

Owns: `load_tasks(cfg, base_dir=...) -> TaskSet` (tasks + one TaskProblem per skipped row),
the dataset shapes it accepts (SWE-bench, SWE-bench Verified, SWE-Gym, SWE-rebench,
SkyRL-v0-293), and the per-dataset image naming rules (images.py).
Out of scope: running or grading tasks (verify/), materialising repositories (runtime/).

Usage:
    ts = load_tasks(recipe.tasks, base_dir=recipe_dir)
    for p in ts.problems: print(p)        # bad rows, skipped
    for task in ts.tasks: ...
"""

from __future__ import annotations

from polar_cli.tasks.images import Dataset, default_image
from polar_cli.tasks.load import TaskProblem, TaskSet, load_tasks, tasks_config

__all__ = ["Dataset", "TaskProblem", "TaskSet", "default_image", "load_tasks", "tasks_config"]
