"""Host subprocesses for the runtime backends: own process group, timeout, capped output, cancel.

Owns: running one argv on the host (which may be `bwrap ...` or `apptainer exec ...`) so that it
can never outlive its caller: it is started in its own process group (a new session), killed as
a group on timeout or cancel, and always reaped. Output is read as it comes and only the tail is
kept (OUTPUT_CAP_BYTES per stream) so a harness printing gigabytes cannot exhaust memory.
Out of scope: what the argv is (local.py / apptainer.py build it), sandbox policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence

from polar_cli.errors import InfraError
from polar_cli.runtime.base import ExecResult

OUTPUT_CAP_BYTES = 4 * 1024 * 1024  # per stream; the tail is kept
READ_CHUNK_BYTES = 64 * 1024
DRAIN_AFTER_KILL_S = 5.0  # a grandchild that escaped the group may hold the pipe open
TRUNCATION_MARK = "[... {n} bytes of output dropped, tail follows ...]\n"


class TailBuffer:
    """Keeps the last `cap` bytes written to it, and how many were dropped before them."""

    def __init__(self, cap: int = OUTPUT_CAP_BYTES) -> None:
        self.cap = cap
        self._buf = bytearray()
        self.dropped = 0

    def write(self, data: bytes) -> None:
        self._buf += data
        excess = len(self._buf) - self.cap
        if excess > 0:
            del self._buf[:excess]
            self.dropped += excess

    def text(self) -> str:
        body = self._buf.decode("utf-8", errors="replace")
        return (TRUNCATION_MARK.format(n=self.dropped) + body) if self.dropped else body


async def _pump(stream: asyncio.StreamReader | None, sink: TailBuffer) -> None:
    if stream is None:
        return
    while chunk := await stream.read(READ_CHUNK_BYTES):
        sink.write(chunk)


def kill_group(pid: int) -> None:
    """SIGKILL the whole process group led by `pid` (started with start_new_session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class ProcessSet:
    """The processes a runtime has running, so `cancel()` can kill them all at once."""

    def __init__(self) -> None:
        self._running: set[asyncio.subprocess.Process] = set()
        self._cancelled: set[int] = set()

    def kill_all(self) -> None:
        for proc in list(self._running):
            self._cancelled.add(proc.pid)
            kill_group(proc.pid)

    @property
    def count(self) -> int:
        return len(self._running)

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | None = None,
        output_cap: int = OUTPUT_CAP_BYTES,
    ) -> ExecResult:
        """Run argv to completion or until `timeout_s`; never leaves a process behind.

        Raises InfraError when argv cannot be started at all (missing binary, bad cwd)."""
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,  # own process group: killpg reaches the whole tree
            )
        except OSError as exc:
            raise InfraError(f"cannot start {argv[0]!r}: {exc}") from exc
        self._running.add(proc)
        out, err = TailBuffer(output_cap), TailBuffer(output_cap)
        timed_out = False
        try:
            pumps: list[asyncio.Future[None]] = [
                asyncio.ensure_future(_pump(proc.stdout, out)),
                asyncio.ensure_future(_pump(proc.stderr, err)),
            ]
            if stdin is not None and proc.stdin is not None:
                pumps.append(asyncio.ensure_future(_feed(proc.stdin, stdin)))
            try:
                async with asyncio.timeout(timeout_s):
                    await proc.wait()
            except TimeoutError:
                timed_out = True
            finally:
                # Normal exit, timeout or our own cancellation: the group dies either way
                # (a daemon the command left behind must not outlive the exec).
                kill_group(proc.pid)
                await _reap(proc)
                await _drain(pumps)
        finally:
            self._running.discard(proc)
        cancelled = proc.pid in self._cancelled
        self._cancelled.discard(proc.pid)
        killed = timed_out or cancelled
        return ExecResult(
            exit_code=-1 if killed else (proc.returncode if proc.returncode is not None else -1),
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
            cancelled=cancelled and not timed_out,
        )


async def _feed(writer: asyncio.StreamWriter, data: bytes) -> None:
    # A command that exits without reading its stdin closes the pipe: that is not an error.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        writer.write(data)
        await writer.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        writer.close()


async def _reap(proc: asyncio.subprocess.Process) -> None:
    # Shielded: even when our caller is being cancelled, the child must be waited for.
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.shield(proc.wait())
    if proc.returncode is None:  # cancelled while waiting: finish synchronously
        with contextlib.suppress(ChildProcessError):
            os.waitpid(proc.pid, 0)


async def _drain(pumps: list[asyncio.Future[None]]) -> None:
    done, pending = await asyncio.wait(pumps, timeout=DRAIN_AFTER_KILL_S)
    for task in pending:
        task.cancel()
    for task in done:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            task.result()


async def run_host(
    argv: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    what: str = "",
) -> ExecResult:
    """One-off host command (git, apptainer pull). Raises InfraError on a non-zero exit or a
    timeout, naming `what` and the stderr tail."""
    res = await ProcessSet().run(argv, timeout_s=timeout_s, env=env, cwd=cwd)
    if res.timed_out:
        raise InfraError(f"{what or argv[0]} timed out after {timeout_s:.0f}s: {' '.join(argv)}")
    if res.exit_code != 0:
        tail = (res.stderr or res.stdout).strip()[-2000:]
        raise InfraError(f"{what or argv[0]} failed (exit {res.exit_code}): {tail}")
    return res
