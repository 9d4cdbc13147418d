"""Harness.run end to end with stand-in harness binaries (shell scripts) under the real `local`
runtime (bubblewrap when available): the order of steps, the clean environment, collection of
log / session file / patch, and the classification of a crashed or hung harness.

The harness executable is the faked edge; the runtime, git and the files are real. The real
harnesses are exercised in test_harness_real.py.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import ClassVar

import pytest

from polar_cli.harness.base import GatewayEndpoint, Harness, HarnessRun, Layout, dump_json
from polar_cli.recipe.schema import HarnessConfig, LocalRuntime
from polar_cli.records import Task
from polar_cli.runtime import RuntimeSpec, open_runtime

HOST_SECRET = "polar-host-secret-must-not-leak"
HANG_MARK = "987654"  # `sleep 9876541` / `sleep 9876542`: findable in /proc afterwards


class ScriptHarness(Harness):
    """A harness whose entry point is a shell script (native: run directly)."""

    name: ClassVar[str] = "script"
    package: ClassVar[str] = "none"
    default_version: ClassVar[str] = "0"
    bin_name: ClassVar[str] = "agent"
    native: ClassVar[bool] = True
    own_paths: ClassVar[tuple[str, ...]] = (".script",)

    def config_files(self, lay: Layout, endpoint: GatewayEndpoint) -> dict[str, str]:
        return {f"{lay.home}/.script/config.json": dump_json({"base_url": endpoint.base_url})}

    def environment(self, lay: Layout, endpoint: GatewayEndpoint) -> dict[str, str]:
        return {"SCRIPT_KEY": endpoint.key}

    def arguments(self, lay: Layout, endpoint: GatewayEndpoint, prompt: str) -> list[str]:
        return [prompt]

    def session_dir(self, lay: Layout) -> str:
        return f"{lay.home}/.script/sessions"


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


@pytest.fixture
def task(tmp_path: Path) -> Task:
    src = tmp_path / "src"
    src.mkdir()
    (src / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (src / "README").write_text("calc\n")
    git(src, "init", "-q")
    git(src, "add", ".")
    git(src, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return Task(
        instance_id="t__calc-1",
        repo="t/calc",
        base_commit=git(src, "rev-parse", "HEAD"),
        problem_statement="add() subtracts. Fix it.",
        snapshot=str(src),
    )


def make_tree(root: Path, script: str) -> Path:
    tree = root / "tree"
    (tree / "node_modules" / ".bin").mkdir(parents=True)
    (tree / "bin").mkdir()
    entry = tree / "node_modules" / ".bin" / "agent"
    entry.write_text("#!/bin/sh\n" + script)
    entry.chmod(0o755)
    return tree


def run_script(
    tmp_path: Path, task: Task, script: str, *, timeout_s: float = 60.0
) -> tuple[HarnessRun, Path]:
    tree = make_tree(tmp_path, script)
    harness = ScriptHarness(HarnessConfig(kind="pi", env={"EXTRA_FROM_RECIPE": "yes"}))
    endpoint = GatewayEndpoint(base_url="http://127.0.0.1:9", key="sk-polar-test", model="m")
    host_dir = tmp_path / "session" / "agent"
    spec = RuntimeSpec("s1", task, host_dir, harness_dir=tree)

    async def go() -> HarnessRun:
        async with open_runtime(LocalRuntime(), spec) as rt:
            return await harness.run(
                rt, task, endpoint, timeout_s=timeout_s, log_path=tmp_path / "logs" / "h.log"
            )

    return asyncio.run(go()), host_dir


OK_SCRIPT = r"""
set -e
env > "$HOME/.script/env.txt"
mkdir -p "$HOME/.script/sessions"
printf '{"turn": 1}\n' > "$HOME/.script/sessions/old.jsonl"
sleep 0.05
printf '{"turn": 2}\n' > "$HOME/.script/sessions/new.jsonl"
sed -i 's/a - b/a + b/' calc.py
printf 'new file\n' > NEW.txt
printf '\000\001\377binary' > blob.bin
printf '\351t\351\n' > latin1.txt
mkdir -p .script && echo '{}' > .script/cache.json
cat "$HOME/.script/config.json"
echo "all done"
"""


def test_ok_run_collects_patch_session_log_and_clean_env(
    tmp_path: Path, task: Task, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POLAR_HOST_SECRET", HOST_SECRET)
    run, host_dir = run_script(tmp_path, task, OK_SCRIPT)
    assert run.status == "ok", run.log_tail
    assert run.exit_code == 0
    assert "all done" in run.log_tail
    # the patch: modified, new, binary and non-UTF-8 files; the harness's own dir left out
    assert "+    return a + b" in run.patch
    assert "diff --git a/NEW.txt b/NEW.txt" in run.patch
    assert "GIT binary patch" in run.patch
    assert "latin1.txt" in run.patch
    assert ".script" not in run.patch
    # the exact bytes are kept next to the log and apply to a pristine clone
    patch_file = tmp_path / "logs" / "harness-patch.diff"
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", task.snapshot or "", str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "apply", str(patch_file)], check=True)
    assert (clone / "blob.bin").read_bytes() == b"\x00\x01\xffbinary"
    assert (clone / "latin1.txt").read_bytes() == b"\xe9t\xe9\n"
    assert (clone / "calc.py").read_text().endswith("return a + b\n")
    # the newest session file was copied out
    assert run.session_file is not None
    assert '"turn": 2' in run.session_file.read_text()
    # the harness's log has stdout (the config file it was given) and the argv header
    log = run.log_path.read_text()
    assert "# status: ok" in log
    assert "http://127.0.0.1:9" in log
    # environment: HOME in the runtime, the session key and recipe env in, nothing of the host
    env_file = host_dir / "home" / ".script" / "env.txt"
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    assert env["SCRIPT_KEY"] == "sk-polar-test"
    assert env["EXTRA_FROM_RECIPE"] == "yes"
    assert env["PATH"].split(":")[0].endswith("/bin")
    assert HOST_SECRET not in env_file.read_text()
    assert env["HOME"] != os.environ["HOME"]


def test_harness_commit_still_counts(tmp_path: Path, task: Task) -> None:
    script = (
        "sed -i 's/a - b/a + b/' calc.py\n"
        "git -c user.name=a -c user.email=a@a commit -qam fix\n"
        "echo later > LATER.txt\n"
    )
    run, _ = run_script(tmp_path, task, script)
    assert run.status == "ok", run.log_tail
    assert "+    return a + b" in run.patch
    assert "LATER.txt" in run.patch


def test_no_change_gives_empty_patch(tmp_path: Path, task: Task) -> None:
    run, _ = run_script(tmp_path, task, "echo nothing to do\n")
    assert run.status == "ok"
    assert run.patch == ""
    assert run.session_file is None


def test_crashing_harness_is_an_error_with_log_tail(tmp_path: Path, task: Task) -> None:
    run, _ = run_script(tmp_path, task, "echo working\necho 'fatal: boom' >&2\nexit 3\n")
    assert run.status == "error"
    assert run.exit_code == 3
    assert "fatal: boom" in run.log_tail
    assert "fatal: boom" in run.log_path.read_text()


def _hang_processes() -> list[str]:
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if f"sleep {HANG_MARK}" in cmd:
            found.append(f"{p.name}: {cmd}")
    return found


def test_hung_harness_times_out_and_leaves_no_process(tmp_path: Path, task: Task) -> None:
    assert _hang_processes() == []
    script = (
        "sed -i 's/a - b/a + b/' calc.py\n"
        f"sleep {HANG_MARK}1 &\n"
        "echo started\n"
        f"exec sleep {HANG_MARK}2\n"
    )
    run, _ = run_script(tmp_path, task, script, timeout_s=4.0)
    assert run.status == "timeout"
    assert run.exit_code == -1
    assert "started" in run.log_tail
    assert "+    return a + b" in run.patch  # work done before the deadline is kept
    assert _hang_processes() == []


def test_harness_cannot_read_host_home_or_another_session(tmp_path: Path, task: Task) -> None:
    from polar_cli.runtime.local import choose_mode

    if choose_mode("auto")[0] != "bwrap":
        pytest.skip("bubblewrap cannot start here: the local runtime runs unsandboxed")
    planted_home = Path.home() / f".polar-harness-test-{os.getpid()}-{tmp_path.name}"
    other = tmp_path / "session-2" / "agent" / "repo"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text(HOST_SECRET)
    planted_home.write_text(HOST_SECRET)
    try:
        script = (
            f"cat {planted_home} > $HOME/seen-home.txt 2>&1\n"
            f"cat {other}/secret.txt > $HOME/seen-other.txt 2>&1\n"
            "exit 0\n"
        )
        run, host_dir = run_script(tmp_path, task, script)
    finally:
        planted_home.unlink()
    assert run.status == "ok", run.log_tail
    for name in ("seen-home.txt", "seen-other.txt"):
        seen = (host_dir / "home" / name).read_text()
        assert HOST_SECRET not in seen, name
        assert "No such file" in seen or "Permission denied" in seen, seen


def test_cancelled_runtime_is_a_timeout_not_a_harness_error(tmp_path: Path, task: Task) -> None:
    tree = make_tree(tmp_path, f"echo started\nexec sleep {HANG_MARK}3\n")
    harness = ScriptHarness(HarnessConfig(kind="pi"))
    endpoint = GatewayEndpoint(base_url="http://127.0.0.1:9", key="k", model="m")
    spec = RuntimeSpec("s1", task, tmp_path / "session" / "agent", harness_dir=tree)

    async def go() -> HarnessRun:
        async with open_runtime(LocalRuntime(), spec) as rt:
            running = asyncio.create_task(
                harness.run(rt, task, endpoint, timeout_s=120.0, log_path=tmp_path / "h.log")
            )
            async with asyncio.timeout(60):
                while not _hang_processes():  # the harness is up
                    await asyncio.sleep(0.05)
            await rt.cancel()  # what the pipeline does at the shared deadline / on shutdown
            return await running

    run = asyncio.run(go())
    assert run.status == "timeout"
    assert run.exit_code == -1
    assert _hang_processes() == []
