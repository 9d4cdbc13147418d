"""The `local` runtime backend: a per-runtime workspace on this host, commands under bubblewrap.

Owns: the host layout of one runtime under `spec.host_dir` (`repo/` the task's repository at
its base commit, `home/` an empty HOME, `artifacts/`, `tmp/`), choosing the sandbox mode from
`runtime.sandbox` (auto | bwrap | none), running each exec in the sandbox (a fresh bwrap per
exec; see sandbox.py for the policy) or as a plain process, and copying files in and out.
Out of scope: the sandbox flags (sandbox.py), process handling (proc.py), cloning (repo.py).

Teardown kills whatever still runs but leaves `spec.host_dir` on disk: the pipeline reads the
patch and logs from it and deletes it when it is done with the session.

In-runtime paths: with bubblewrap they are stable (`/tmp/polar/repo`, `/tmp/polar/home`,
`/tmp/polar/artifacts`, `/tmp/polar/harness`); in plain mode they are the host paths.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

from polar_cli.errors import InfraError, SetupError
from polar_cli.recipe.schema import LocalRuntime
from polar_cli.runtime import files, sandbox
from polar_cli.runtime.base import ExecResult, RuntimeSpec
from polar_cli.runtime.proc import ProcessSet
from polar_cli.runtime.repo import materialise_repo, snapshot_path

log = logging.getLogger(__name__)

_warned_plain = False  # the no-sandbox warning is printed once per process


def _warn_plain_once(reason: str) -> None:
    global _warned_plain
    if not _warned_plain:
        _warned_plain = True
        log.warning(
            "runtime: %s; sessions run as plain processes WITHOUT isolation "
            "(install bubblewrap, or set runtime.sandbox=none to silence this)",
            reason,
        )


def choose_mode(sandbox_opt: str) -> tuple[Literal["bwrap", "plain"], str | None]:
    """('bwrap', path) or ('plain', None) for runtime.sandbox; SetupError when bwrap is
    required but missing or broken."""
    if sandbox_opt == "none":
        return "plain", None
    bwrap = sandbox.find_bwrap()
    problem = "bubblewrap (bwrap) not found on PATH" if bwrap is None else None
    if bwrap is not None:
        problem = sandbox.probe_bwrap(bwrap)
    if problem is None:
        return "bwrap", bwrap
    if sandbox_opt == "bwrap":
        raise SetupError(
            f"runtime.sandbox=bwrap but {problem}: install bubblewrap (apt-get install "
            "bubblewrap) and allow unprivileged user namespaces, or set runtime.sandbox=auto"
        )
    _warn_plain_once(problem)
    return "plain", None


class LocalBackend:
    """One runtime on this host (see the module docstring). Use as an async context manager."""

    def __init__(self, cfg: LocalRuntime, spec: RuntimeSpec) -> None:
        snapshot_path(spec.task)  # fail fast: a task without a snapshot cannot run locally
        self.cfg = cfg
        self.spec = spec
        root = spec.host_dir.resolve()
        self.host_repo = root / "repo"
        self.host_home = root / "home"
        self.host_artifacts = root / "artifacts"
        self.host_tmp = root / "tmp"
        self.host_harness = spec.harness_dir.resolve() if spec.harness_dir else None
        self.mode: Literal["bwrap", "plain"] = "plain"
        self._bwrap: str | None = None
        self._procs = ProcessSet()
        self._hide: tuple[Path, ...] = ()
        self._entered = False
        self._set_paths()

    def _set_paths(self) -> None:
        if self.mode == "bwrap":
            self.repo_dir = sandbox.SANDBOX_REPO
            self.home_dir = sandbox.SANDBOX_HOME
            self.artifacts_dir = sandbox.SANDBOX_ARTIFACTS
            self.harness_dir = sandbox.SANDBOX_HARNESS if self.host_harness else None
            self._tmpdir = "/tmp"
        else:
            self.repo_dir = str(self.host_repo)
            self.home_dir = str(self.host_home)
            self.artifacts_dir = str(self.host_artifacts)
            self.harness_dir = str(self.host_harness) if self.host_harness else None
            self._tmpdir = str(self.host_tmp)

    # ----------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Self:
        self.mode, self._bwrap = await asyncio.to_thread(choose_mode, self.cfg.sandbox)
        self._set_paths()
        self._hide = sandbox.hide_dirs(self.spec.host_dir, self.cfg.workdir)
        if self.host_harness is not None and not self.host_harness.is_dir():
            raise SetupError(
                f"harness tree {self.host_harness} does not exist: install the harness first "
                "(polar harness install NAME)"
            )
        missing = [str(p) for p in self.spec.ro_paths if not p.exists()]
        if missing:
            raise SetupError(
                f"RuntimeSpec.ro_paths do not exist on this host: {', '.join(missing)}"
            )
        for d in (self.host_home, self.host_artifacts, self.host_tmp):
            d.mkdir(parents=True, exist_ok=True)
        await materialise_repo(self.spec.task, self.host_repo)
        self._entered = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.cancel()
        self._entered = False

    async def cancel(self) -> None:
        self._procs.kill_all()

    # ----------------------------------------------------------------- exec

    async def exec(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        if not self._entered:
            raise InfraError("runtime not entered: use `async with open_runtime(...)`")
        if not argv:
            raise ValueError("exec needs a non-empty argv")
        full_env = sandbox.base_env(self.home_dir, self._tmpdir, env)
        cwd = cwd or self.repo_dir
        if self.mode == "bwrap":
            assert self._bwrap is not None
            mounts = sandbox.SandboxMounts(
                repo=self.host_repo,
                home=self.host_home,
                artifacts=self.host_artifacts,
                harness=self.host_harness,
                hide=self._hide,
                network=self.spec.purpose == "agent",
                ro_paths=tuple(p.resolve() for p in self.spec.ro_paths),
            )
            prefix = sandbox.bwrap_argv(self._bwrap, mounts, full_env, cwd)
            return await self._procs.run(
                [*prefix, *argv],
                timeout_s=timeout_s,
                env={"PATH": sandbox.DEFAULT_PATH, "LANG": "C.UTF-8"},
                cwd=str(self.host_tmp),
                stdin=stdin,
            )
        if not Path(cwd).is_dir():
            raise InfraError(f"exec cwd {cwd} does not exist in runtime {self.spec.session_id}")
        return await self._procs.run(argv, timeout_s=timeout_s, env=full_env, cwd=cwd, stdin=stdin)

    # ----------------------------------------------------------------- files

    def host_path(self, path: str, *, writable: bool) -> Path:
        """The host path behind in-runtime `path` (which must lie in one of the runtime's
        directories; the harness tree only when not writing)."""
        roots = {
            self.repo_dir: self.host_repo,
            self.home_dir: self.host_home,
            self.artifacts_dir: self.host_artifacts,
        }
        if self.mode == "plain":
            roots[self._tmpdir] = self.host_tmp
        if self.harness_dir is not None and self.host_harness is not None and not writable:
            roots[self.harness_dir] = self.host_harness
        host = files.host_path(path, roots)
        if host is None:
            raise InfraError(
                f"{path} is outside the runtime's directories ({', '.join(roots)}): "
                "upload/download only reach the repo, home and artifacts dirs"
            )
        return host

    async def upload(self, src: Path, dst: str) -> None:
        await asyncio.to_thread(files.copy_path, src, self.host_path(dst, writable=True))

    async def download(self, src: str, dst: Path) -> None:
        await asyncio.to_thread(files.copy_path, self.host_path(src, writable=False), dst)
