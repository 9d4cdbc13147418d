"""Runtime overheads: opening a local runtime (clone at base commit) and one `exec` of `true`,
under bubblewrap and as a plain process, plus N concurrent execs. Prints figures; asserts
nothing (run by `make bench`)."""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from polar_cli.recipe.schema import LocalRuntime
from polar_cli.records import Task
from polar_cli.runtime import RuntimeSpec, open_runtime
from polar_cli.runtime.sandbox import find_bwrap, probe_bwrap

EXECS = 50
CONCURRENT = 16


def make_repo(root: Path) -> Task:
    src = root / "snap"
    src.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null"}
    for i in range(200):
        (src / f"m{i}.py").write_text(f"X = {i}\n" * 50)
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "base"]):
        subprocess.run(
            ["git", "-c", "user.name=b", "-c", "user.email=b@b", *args],
            cwd=src,
            env=env,
            check=True,
        )
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True, check=True
    )
    return Task("bench__1", "b/b", head.stdout.strip(), "p", snapshot=str(src))


async def bench(mode: str, task: Task, root: Path) -> None:
    t0 = time.perf_counter()
    async with open_runtime(LocalRuntime(sandbox=mode), RuntimeSpec("s", task, root / mode)) as rt:  # type: ignore[arg-type]
        opened = time.perf_counter() - t0
        lat = []
        for _ in range(EXECS):
            t = time.perf_counter()
            await rt.exec(["true"], timeout_s=30)
            lat.append(time.perf_counter() - t)
        t = time.perf_counter()
        await asyncio.gather(*(rt.exec(["true"], timeout_s=30) for _ in range(CONCURRENT)))
        conc = time.perf_counter() - t
    print(
        f"{mode:6s} open(clone 200 files) {opened * 1000:7.1f} ms | exec true: median "
        f"{statistics.median(lat) * 1000:6.1f} ms, p90 {sorted(lat)[int(0.9 * EXECS)] * 1000:6.1f} ms "
        f"| {CONCURRENT} concurrent {conc * 1000:7.1f} ms"
    )


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="polar-bench-rt-", dir="/var/tmp"))
    try:
        task = make_repo(root)
        modes = ["none"]
        bwrap = find_bwrap()
        if bwrap and probe_bwrap(bwrap) is None:
            modes.insert(0, "bwrap")
        else:
            print("bwrap: not usable here, skipped")
        for mode in modes:
            asyncio.run(bench(mode, task, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
