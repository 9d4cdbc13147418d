"""The staged scheduler: INIT -> READY -> RUNNING -> POSTRUN at fixed concurrency.

Owns: moving work items through the four stages with bounded workers per stage, the bounded READY
buffer (backpressure to admission), re-admission of follow-up items (retries), graceful stop, and
per-stage counters for the progress view. Out of scope: what a stage does (generate.py supplies
the three stage callables), the ledger, the dataset.

Shape of a run:
- admission feeds items to INIT only while the READY buffer has room (so at most
  `init_workers + ready_buffer` items are prepared but not yet running);
- INIT (`init_workers` at once) prepares an item (e.g. opens its runtime);
- RUNNING takes prepared items from READY, at most `concurrency` at once;
- POSTRUN (`postrun_workers` at once) finishes an item (verify, record, tear down) and may return
  follow-up items (a retry attempt) which go back to admission ahead of new work.

Every item that entered INIT reaches POSTRUN exactly once unless the run is stopped: a stage
callable that raises is the generate layer's bug, so the error is handed to `on_error` and the
item still goes on to POSTRUN with the exception attached (the lifecycle there turns it into a
ledger row). On stop, admission ends at once; items in INIT/READY are handed to `discard`
(their prepared resources released, nothing recorded: a resume re-runs them); RUNNING items get
`grace_s` to finish before they are cancelled and discarded the same way.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

I = TypeVar("I")  # noqa: E741  (work item)
P = TypeVar("P")  # prepared item
R = TypeVar("R")  # ran item

STAGES = ("queued", "init", "ready", "running", "postrun", "done")


@dataclass
class StageCounts:
    """Live counters, read by the progress view. `done` counts POSTRUN completions."""

    queued: int = 0
    init: int = 0
    ready: int = 0
    running: int = 0
    postrun: int = 0
    done: int = 0
    discarded: int = 0
    followups: int = 0


@dataclass(frozen=True)
class StageLimits:
    init_workers: int
    ready_buffer: int
    concurrency: int
    postrun_workers: int
    grace_s: float = 30.0


@dataclass
class Stages(Generic[I, P, R]):
    """The three stage callables plus the discard hook (release a prepared item unrecorded)."""

    init: Callable[[I], Awaitable[P]]
    run: Callable[[P], Awaitable[R]]
    postrun: Callable[[R], Awaitable[Iterable[I]]]
    discard: Callable[[I | P | R], Awaitable[None]]
    # Turn a stage failure into something POSTRUN can record: (item at that stage, exc) -> R
    on_init_error: Callable[[I, BaseException], R] | None = None
    on_run_error: Callable[[P, BaseException], R] | None = None


@dataclass
class _State(Generic[I]):
    pending: deque[I] = field(default_factory=deque)
    stopping: bool = False


class Scheduler(Generic[I, P, R]):
    """Run `items` through `stages`. `await scheduler.run(items)`; `scheduler.stop()` from a
    signal handler stops admission and lets RUNNING items finish within `grace_s`."""

    def __init__(self, stages: Stages[I, P, R], limits: StageLimits) -> None:
        self.stages = stages
        self.limits = limits
        self.counts = StageCounts()
        self._state: _State[I] = _State()
        self._stop_event = asyncio.Event()
        self._work_changed = asyncio.Event()

    # ------------------------------------------------------------------ control

    def stop(self) -> None:
        """Stop admitting work; running items get the grace period. Idempotent."""
        self._state.stopping = True
        self._stop_event.set()
        self._work_changed.set()

    @property
    def stopping(self) -> bool:
        return self._state.stopping

    # ------------------------------------------------------------------ run

    async def run(self, items: Iterable[I]) -> StageCounts:
        self._state.pending.extend(items)
        self.counts.queued = len(self._state.pending)
        lim = self.limits
        # READY holds prepared items; INIT may only start when a READY slot is reserved for it.
        ready: asyncio.Queue[P | _Failed[R]] = asyncio.Queue()
        ready_slots = asyncio.Semaphore(lim.ready_buffer + lim.init_workers)
        init_slots = asyncio.Semaphore(lim.init_workers)
        run_slots = asyncio.Semaphore(lim.concurrency)
        post_queue: asyncio.Queue[R] = asyncio.Queue()
        in_flight = _Counter()  # items admitted and not yet through POSTRUN (or discarded)
        running_tasks: set[asyncio.Task[None]] = set()

        async def admit() -> None:
            async with asyncio.TaskGroup() as tg:
                while True:
                    if self._state.stopping:
                        return
                    if not self._state.pending:
                        if in_flight.value == 0:
                            return  # nothing pending, nothing that could add follow-ups
                        self._work_changed.clear()
                        await self._work_changed.wait()
                        continue
                    await ready_slots.acquire()
                    if self._state.stopping or not self._state.pending:
                        ready_slots.release()
                        continue
                    await init_slots.acquire()
                    item = self._state.pending.popleft()
                    self.counts.queued = len(self._state.pending)
                    in_flight.inc()
                    tg.create_task(do_init(item))

        async def do_init(item: I) -> None:
            self.counts.init += 1
            try:
                prepared: P | _Failed[R] = await self.stages.init(item)
            except Exception as exc:  # the lifecycle records it; never lose the item
                if self.stages.on_init_error is None:
                    raise
                prepared = _Failed(self.stages.on_init_error(item, exc))
            finally:
                self.counts.init -= 1
                init_slots.release()
            if self._state.stopping:
                await self._discard(prepared, in_flight, ready_slots)
                return
            self.counts.ready += 1
            await ready.put(prepared)

        async def dispatch() -> None:
            # Runs until cancelled by run() once everything admitted has left the pipeline.
            async with asyncio.TaskGroup() as tg:
                while True:
                    prepared = await ready.get()
                    if isinstance(prepared, _Failed):
                        self.counts.ready -= 1
                        ready_slots.release()
                        await post_queue.put(prepared.result)
                        continue
                    # the item stays in READY (holding its slot) until a run slot is free
                    holds_run_slot = not self._state.stopping
                    if holds_run_slot:
                        await run_slots.acquire()
                    self.counts.ready -= 1
                    ready_slots.release()
                    if self._state.stopping:
                        if holds_run_slot:
                            run_slots.release()
                        await self._discard(prepared, in_flight, None)
                        continue
                    task = tg.create_task(do_run(prepared))
                    running_tasks.add(task)
                    task.add_done_callback(running_tasks.discard)

        async def do_run(prepared: P) -> None:
            self.counts.running += 1
            try:
                try:
                    result: R = await self.stages.run(prepared)
                except asyncio.CancelledError:
                    await self._discard(prepared, in_flight, None)
                    raise
                except Exception as exc:
                    if self.stages.on_run_error is None:
                        raise
                    result = self.stages.on_run_error(prepared, exc)
            finally:
                self.counts.running -= 1
                run_slots.release()
            await post_queue.put(result)

        async def postrun_worker() -> None:
            while True:
                result = await post_queue.get()
                self.counts.postrun += 1
                try:
                    followups = list(await self.stages.postrun(result))
                finally:
                    self.counts.postrun -= 1
                    self.counts.done += 1
                if followups and not self._state.stopping:
                    # retries go ahead of fresh work so a task's attempts stay close together
                    self._state.pending.extendleft(reversed(followups))
                    self.counts.followups += len(followups)
                    self.counts.queued = len(self._state.pending)
                in_flight.dec()
                self._work_changed.set()

        async def grace_watch() -> None:
            await self._stop_event.wait()
            await asyncio.sleep(lim.grace_s)
            for task in list(running_tasks):
                task.cancel()

        async with asyncio.TaskGroup() as tg:
            workers = [tg.create_task(postrun_worker()) for _ in range(lim.postrun_workers)]
            watcher = tg.create_task(grace_watch())
            disp = tg.create_task(dispatch())
            await admit()
            # wait until everything admitted has gone through POSTRUN (or was discarded)
            await in_flight.zero()
            disp.cancel()
            watcher.cancel()
            for w in workers:
                w.cancel()
        return self.counts

    async def _discard(
        self, item: object, in_flight: _Counter, ready_slots: asyncio.Semaphore | None
    ) -> None:
        try:
            target = item.result if isinstance(item, _Failed) else item
            await self.stages.discard(target)  # type: ignore[arg-type]
        finally:
            if ready_slots is not None:
                ready_slots.release()
            self.counts.discarded += 1
            in_flight.dec()
            self._work_changed.set()


@dataclass(frozen=True)
class _Failed(Generic[R]):
    """A stage failure already turned into a POSTRUN input; skips RUNNING."""

    result: R


class _Counter:
    """An integer with an awaitable 'is zero' condition."""

    def __init__(self) -> None:
        self.value = 0
        self._zero = asyncio.Event()
        self._zero.set()

    def inc(self) -> None:
        self.value += 1
        self._zero.clear()

    def dec(self) -> None:
        self.value -= 1
        if self.value == 0:
            self._zero.set()

    async def zero(self) -> None:
        while self.value:
            await self._zero.wait()
            if self.value:
                self._zero.clear()
