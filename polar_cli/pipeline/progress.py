"""Progress of a running `polar generate`: a rich live view on a terminal, plain lines otherwise.

Owns: rendering the scheduler's stage counters plus accepted / attempted, acceptance rate and
ETA. On a TTY a rich Live table refreshes in place; when stdout is not a TTY (Slurm logs, CI) it
prints one tqdm-style line at most every `PLAIN_INTERVAL_S` seconds and whenever an attempt ends,
so logs stay readable. The counts / elapsed / ETA part of those lines is tqdm's own
`format_meter`; a live tqdm bar is not used there because it redraws with carriage returns,
which a Slurm log keeps as one ever-growing line. Out of scope: computing the figures
(scheduler counters + the lifecycle's tallies are passed in).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

from polar_cli.pipeline.scheduler import StageCounts

PLAIN_INTERVAL_S = 30.0
LIVE_REFRESH_PER_S = 2


@dataclass
class Tally:
    """Attempts finished so far in this process (resumed ones are counted in `resumed`)."""

    total_planned: int = 0
    resumed: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)

    @property
    def attempted(self) -> int:
        return sum(self.outcomes.values())

    @property
    def accepted(self) -> int:
        return self.outcomes.get("accepted", 0)


def _fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    """`with Progress(counts, tally) as p: ... p.update()` (call update after each attempt)."""

    def __init__(
        self,
        counts: StageCounts,
        tally: Tally,
        *,
        stream: TextIO | None = None,
        force_plain: bool = False,
    ) -> None:
        self.counts = counts
        self.tally = tally
        self.stream = stream or sys.stdout
        self.live_mode = self.stream.isatty() and not force_plain
        self._t0 = time.monotonic()
        self._last_plain = 0.0
        self._live: Any = None  # rich.live.Live when live_mode (imported lazily)

    # ------------------------------------------------------------------ figures

    def eta_s(self) -> float | None:
        done = self.tally.attempted
        left = self.counts.queued + self.counts.init + self.counts.ready + self.counts.running
        if not done:
            return None
        return (time.monotonic() - self._t0) / done * left

    def line(self) -> str:
        from tqdm import tqdm

        c, t = self.counts, self.tally
        rate = f"{t.accepted / t.attempted:.1%}" if t.attempted else "-"
        total = t.total_planned + c.followups  # retries join the plan as they are earned
        meter = tqdm.format_meter(
            t.attempted,
            max(total, t.attempted),
            time.monotonic() - self._t0,
            unit="attempt",
            bar_format="{n_fmt}/{total_fmt} attempts [{elapsed}<{remaining}, {rate_fmt}]",
        )
        return (
            f"[polar] {meter} | queued {c.queued} init {c.init} ready {c.ready} "
            f"running {c.running} postrun {c.postrun} | accepted {t.accepted}/{t.attempted} "
            f"({rate}) | resumed {t.resumed}"
        )

    def _table(self):  # type: ignore[no-untyped-def]
        from rich.table import Table

        c, t = self.counts, self.tally
        table = Table(title="polar generate", expand=False)
        for col in ("queued", "init", "ready", "running", "postrun", "done"):
            table.add_column(col, justify="right")
        table.add_column("accepted / attempted", justify="right")
        table.add_column("rate", justify="right")
        table.add_column("eta", justify="right")
        rate = f"{t.accepted / t.attempted:.1%}" if t.attempted else "-"
        table.add_row(
            str(c.queued),
            str(c.init),
            str(c.ready),
            str(c.running),
            str(c.postrun),
            str(t.attempted),
            f"{t.accepted} / {t.attempted}",
            rate,
            _fmt_eta(self.eta_s()),
        )
        if t.outcomes:
            table.caption = "  ".join(f"{k} {v}" for k, v in sorted(t.outcomes.items()))
        return table

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Progress:
        if self.live_mode:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(
                self._table(),
                console=Console(file=self.stream),
                refresh_per_second=LIVE_REFRESH_PER_S,
                get_renderable=self._table,
            )
            self._live.__enter__()
        return self

    def update(self, *, force: bool = False) -> None:
        if self.live_mode:
            return  # Live re-renders by itself
        now = time.monotonic()
        if force or now - self._last_plain >= PLAIN_INTERVAL_S:
            self._last_plain = now
            print(self.line(), file=self.stream, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None
        else:
            self.update(force=True)
