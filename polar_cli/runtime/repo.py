"""Materialising a task's repository on the host from its snapshot, at the base commit.

Owns: `git clone` of `task.snapshot` (a git bundle file or a repository directory, already
resolved to an absolute path by the task loader) into a runtime's workspace without network,
checking out the base commit detached, removing the remote, and giving the clone a sane local
git config so a harness can commit. Every runtime clones afresh, so an evaluator runtime always
starts from the pristine snapshot whatever an agent did to its own workspace.
Out of scope: where the workspace lives (the backends), container images (apptainer.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from polar_cli.errors import InfraError, SetupError
from polar_cli.records import Task
from polar_cli.runtime.proc import run_host

GIT_TIMEOUT_S = 600.0
GIT_USER_NAME = "polar"
GIT_USER_EMAIL = "polar@localhost"

# The host's git configuration (credential helpers, url rewrites, hooks paths) must not shape a
# task's clone; only the system defaults and these settings apply.
_GIT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
    "LANG": "C.UTF-8",
}


def snapshot_path(task: Task) -> Path:
    """The task's snapshot as an existing path; SetupError when it has none (local runtime)."""
    if not task.snapshot:
        raise SetupError(
            f"task {task.instance_id!r} has no repository snapshot, which the local runtime "
            "needs: use runtime.kind=apptainer (its image holds the repository) or give the "
            "task a snapshot"
        )
    path = Path(task.snapshot)
    if not path.is_absolute() or not path.exists():
        raise SetupError(
            f"task {task.instance_id!r}: snapshot {task.snapshot!r} does not exist "
            "(expected an absolute path to a git bundle or repository directory)"
        )
    return path


async def _git(*args: str, cwd: Path | None = None, what: str) -> str:
    git = shutil.which("git", path=_GIT_ENV["PATH"]) or shutil.which("git")
    if git is None:
        raise SetupError("git not found on PATH: install git (apt-get install git)")
    res = await run_host(
        [git, *args],
        timeout_s=GIT_TIMEOUT_S,
        env=_GIT_ENV,
        cwd=str(cwd) if cwd else None,
        what=what,
    )
    return res.stdout


async def materialise_repo(task: Task, dest: Path) -> None:
    """Clone the task's snapshot into `dest` (replaced if present) at `task.base_commit`."""
    src = snapshot_path(task)
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # --no-hardlinks: the workspace shares no object file with the snapshot, so nothing done in
    # it can ever reach the pristine copy later runtimes clone from.
    await _git(
        "clone", "-q", "--no-hardlinks", "--no-checkout", str(src), str(dest),
        what=f"cloning the snapshot of task {task.instance_id!r}",
    )  # fmt: skip
    try:
        await _git(
            "checkout", "-q", "--detach", task.base_commit,
            cwd=dest, what=f"checking out {task.base_commit} for task {task.instance_id!r}",
        )  # fmt: skip
    except InfraError as exc:
        raise SetupError(
            f"task {task.instance_id!r}: base commit {task.base_commit!r} is not in its "
            f"snapshot {src}: {exc}"
        ) from exc
    await _git("remote", "remove", "origin", cwd=dest, what="removing the clone's remote")
    for key, value in (
        ("user.name", GIT_USER_NAME),
        ("user.email", GIT_USER_EMAIL),
        ("commit.gpgsign", "false"),
        ("core.hooksPath", "/dev/null"),
    ):
        await _git("config", key, value, cwd=dest, what=f"setting git {key}")
