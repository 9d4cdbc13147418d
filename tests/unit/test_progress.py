from __future__ import annotations

import io

from polar_cli.pipeline.progress import Progress, Tally
from polar_cli.pipeline.scheduler import StageCounts


def test_plain_lines_when_not_a_tty() -> None:
    out = io.StringIO()
    counts = StageCounts(queued=5, running=2)
    tally = Tally(total_planned=10)
    counts.followups = 2
    tally.outcomes.update({"accepted": 2, "tests_failed": 1})
    with Progress(counts, tally, stream=out) as p:
        assert not p.live_mode
        p.update(force=True)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # the forced update and the final line
    assert "accepted 2/3 (66.7%)" in lines[0] and "queued 5" in lines[0] and "running 2" in lines[0]
    assert "3/12 attempts [" in lines[0]  # tqdm's meter: done / planned + earned retries


def test_eta_unknown_until_something_finished() -> None:
    p = Progress(StageCounts(queued=3), Tally(), stream=io.StringIO())
    assert p.eta_s() is None
    assert "0/0 attempts [00:00<?" in p.line()
