"""Host-side file plumbing shared by the runtime backends.

Owns: mapping an in-runtime path that lies in one of a runtime's bound directories to its host
path (refusing `..` escapes), and copying / removing host files and directory trees.
Out of scope: copies that must happen inside a container (apptainer.py stages those).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Mapping
from pathlib import Path

from polar_cli.errors import InfraError


def under(path: str, roots: Mapping[str, Path] | list[str]) -> str | None:
    """The root among `roots` (in-runtime paths) that `path` lies under, if any."""
    for root in roots:
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return root
    return None


def host_path(path: str, roots: Mapping[str, Path]) -> Path | None:
    """The host path behind in-runtime `path`, or None when it lies in none of `roots`.
    InfraError when `..` would lead out of its root."""
    root = under(path, roots)
    if root is None:
        return None
    base = roots[root].resolve()
    host = (base / path[len(root) :].lstrip("/")).resolve()
    if host != base and base not in host.parents:
        raise InfraError(f"{path} escapes the runtime's directory {root}")
    return host


def copy_path(src: Path, dst: Path) -> None:
    """Copy a file or a directory tree (merging into an existing one); symlinks kept."""
    if not src.exists():
        raise InfraError(f"cannot copy {src}: it does not exist")
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copy2(src, dst)


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
