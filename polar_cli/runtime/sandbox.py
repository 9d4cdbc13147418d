"""The bubblewrap sandbox policy of the local runtime: which bwrap flags, and whether bwrap works.

Owns: building the `bwrap ...` argv prefix for one exec (read-only host root, private /tmp,
/dev, /proc, all namespaces unshared except the network for agents, the host's home
directories and other sessions' directories hidden, this runtime's dirs bound writable at
stable in-sandbox paths, the harness tree bound read-only, a cleared environment), the clean
environment itself, and a cached probe that bwrap really starts on this host.
Out of scope: running the argv (proc.py), the workspace (local.py).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROBE_TIMEOUT_S = 10.0

# Stable paths inside the sandbox (bwrap creates the mount points under the /tmp tmpfs).
SANDBOX_ROOT = "/tmp/polar"
SANDBOX_REPO = f"{SANDBOX_ROOT}/repo"
SANDBOX_HOME = f"{SANDBOX_ROOT}/home"
SANDBOX_ARTIFACTS = f"{SANDBOX_ROOT}/artifacts"
SANDBOX_HARNESS = f"{SANDBOX_ROOT}/harness"

# Host directories that may hold credentials (ssh keys, cloud configs, tokens): always hidden.
HIDDEN_HOME_DIRS = ("/root", "/home")
# Everything the sandbox replaces with an empty tmpfs: its private /tmp and the home dirs.
MASKED_DIRS = ("/tmp", *HIDDEN_HOME_DIRS)


def python_ro_paths() -> tuple[Path, ...]:
    """The running Python's installation and virtual environment, where the sandbox masks them
    (a pyenv Python under /root, a checkout -- and its .venv -- under /tmp): give them as
    `RuntimeSpec.ro_paths` so a command in the sandbox can run this Python (the evaluator's
    pytest). Narrow on purpose: never a whole home directory."""
    paths: list[Path] = []
    for prefix in (sys.base_prefix, sys.prefix):
        real = Path(prefix).resolve()
        if any(real.is_relative_to(m) for m in MASKED_DIRS) and real not in paths:
            paths.append(real)
    return tuple(paths)


def base_env(home: str, tmpdir: str, extra: Mapping[str, str] | None) -> dict[str, str]:
    """The minimal environment every exec gets, then the caller's variables on top."""
    env = {"PATH": DEFAULT_PATH, "HOME": home, "LANG": "C.UTF-8", "TERM": "dumb", "TMPDIR": tmpdir}
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class SandboxMounts:
    """Host directories of one runtime and what to hide around them."""

    repo: Path
    home: Path
    artifacts: Path
    harness: Path | None
    hide: tuple[Path, ...]  # host dirs masked by an empty tmpfs (other sessions' dirs)
    network: bool  # share the host network namespace (agents reach the gateway on 127.0.0.1)
    ro_paths: tuple[Path, ...] = ()  # shown read-only at their own path, even under a mask


def hide_dirs(host_dir: Path, workdir: str | None) -> tuple[Path, ...]:
    """Which host directories to mask so no other session's directory is visible.

    Session dirs are siblings or cousins of this runtime's `host_dir` (e.g.
    `<run>/work/<session>/<purpose>`), so we mask its parent and grandparent, and the configured
    workdir when given. A candidate is skipped when it is a top-level directory (`/work`) or an
    ancestor of this process's working directory or Python environment -- masking those could
    hide the tools a command needs. `host_dir` itself is always masked (its contents are bound
    back at the sandbox paths)."""
    resolved = host_dir.resolve()
    keep = [Path.cwd().resolve(), Path(sys.prefix).resolve()]
    candidates = [resolved.parent, resolved.parent.parent]
    if workdir:
        candidates.append(Path(workdir).expanduser().resolve())
    out: list[Path] = []
    for cand in candidates:
        if len(cand.parts) <= 2 or cand in out:
            continue
        if any(k == cand or cand in k.parents for k in keep):
            continue
        out.append(cand)
    if resolved not in out:
        out.append(resolved)
    # Outermost first: a mask over a parent must not later cover a mask over its child.
    return tuple(sorted(out, key=lambda p: len(p.parts)))


def bwrap_argv(bwrap: str, mounts: SandboxMounts, env: Mapping[str, str], cwd: str) -> list[str]:
    """The argv prefix running a command in the sandbox; append the command's argv to it."""
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for home in HIDDEN_HOME_DIRS:
        if Path(home).is_dir():
            argv += ["--tmpfs", home]
    for hidden in mounts.hide:
        argv += ["--tmpfs", str(hidden)]
    # Binds come after the tmpfs masks: sources are taken from the host's tree, so a runtime
    # dir under a masked parent is still bound at its sandbox path.
    argv += ["--bind", str(mounts.repo), SANDBOX_REPO]
    argv += ["--bind", str(mounts.home), SANDBOX_HOME]
    argv += ["--bind", str(mounts.artifacts), SANDBOX_ARTIFACTS]
    if mounts.harness is not None:
        argv += ["--ro-bind", str(mounts.harness), SANDBOX_HARNESS]
    for path in mounts.ro_paths:
        argv += ["--ro-bind", str(path), str(path)]
    argv += ["--unshare-all"]
    if mounts.network:
        argv += ["--share-net"]
    argv += ["--die-with-parent", "--new-session", "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += ["--chdir", cwd, "--"]
    return argv


@functools.cache
def probe_bwrap(bwrap: str) -> str | None:
    """None when `bwrap` starts a sandbox like ours on this host, else why not (cached).

    Being installed is not enough: user namespaces may be disabled, or a container may deny
    the mounts. Blocking (a few ms); called once per process."""
    argv = [bwrap, "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc"]
    argv += ["--unshare-all", "--die-with-parent", "--new-session", "--", "true"]
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
            env={"PATH": DEFAULT_PATH},  # `true` must resolve whatever the caller's PATH
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} did not run: {exc}"
    if proc.returncode != 0:
        return f"{bwrap} failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
    return None


def find_bwrap() -> str | None:
    return shutil.which("bwrap")
