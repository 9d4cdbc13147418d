"""Benchmark: the staged scheduler with synthetic stages of known mean times.

Prints achieved sessions/s against the capacity bound min(c_I/t_I, c_R/t_R, c_P/t_P) and against
a serial baseline (one session at a time through all stages), and the peak traced memory of a run
with 10,000 queued tasks. Asserts nothing about time (figures only).
"""

from __future__ import annotations

import asyncio
import random
import time
import tracemalloc
from collections.abc import Iterable

from polar_cli.pipeline.scheduler import Scheduler, StageLimits, Stages

T_INIT, T_RUN, T_POST = 0.010, 0.040, 0.008  # mean stage times (s), exponential
LIMITS = StageLimits(init_workers=4, ready_buffer=4, concurrency=8, postrun_workers=4)


def stages(rng: random.Random, scale: float = 1.0) -> Stages[int, int, int]:
    async def init(i: int) -> int:
        await asyncio.sleep(rng.expovariate(1 / (T_INIT * scale)))
        return i

    async def run(i: int) -> int:
        await asyncio.sleep(rng.expovariate(1 / (T_RUN * scale)))
        return i

    async def post(i: int) -> Iterable[int]:
        await asyncio.sleep(rng.expovariate(1 / (T_POST * scale)))
        return ()

    async def discard(_: object) -> None:
        return None

    return Stages(init=init, run=run, postrun=post, discard=discard)


async def serial(n: int, rng: random.Random) -> float:
    st = stages(rng)
    t0 = time.perf_counter()
    for i in range(n):
        await st.postrun(await st.run(await st.init(i)))
    return n / (time.perf_counter() - t0)


async def staged(n: int, rng: random.Random) -> float:
    t0 = time.perf_counter()
    await Scheduler(stages(rng), LIMITS).run(range(n))
    return n / (time.perf_counter() - t0)


def main() -> None:
    n = 400
    bound = min(
        LIMITS.init_workers / T_INIT, LIMITS.concurrency / T_RUN, LIMITS.postrun_workers / T_POST
    )
    s_rate = asyncio.run(serial(60, random.Random(0)))
    p_rate = asyncio.run(staged(n, random.Random(0)))
    print(f"stage means (s): init {T_INIT} run {T_RUN} post {T_POST}; limits {LIMITS}")
    print(f"capacity bound          : {bound:8.1f} sessions/s")
    print(f"staged scheduler (n={n}): {p_rate:8.1f} sessions/s = {p_rate / bound:5.1%} of bound")
    print(f"serial baseline         : {s_rate:8.1f} sessions/s -> speed-up {p_rate / s_rate:5.2f}x")

    tracemalloc.start()
    t0 = time.perf_counter()
    asyncio.run(Scheduler(stages(random.Random(0), scale=0.01), LIMITS).run(range(10_000)))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        f"10,000 queued tasks     : peak traced memory {peak / 1e6:6.2f} MB, "
        f"{time.perf_counter() - t0:5.2f} s wall"
    )


if __name__ == "__main__":
    main()
