"""Reading a test run's log: per-test statuses, plus what the cross-checks need.

Owns: `parse_log(log, parser) -> ParsedLog`. The default (pytest `-rA` logs, log_parser None or
`parse_log_pytest`) is the project's own parser; any other name is looked up in `swebench`'s
`PARSER_REGISTRY` (swebench 5.0.2, imported lazily: ~1.5 s and ~480 MB, so only when a task
names a non-pytest parser, e.g. SWE-rebench's `install_config.log_parser` or django / sympy).
Out of scope: grading (grading.py), running anything (evaluate.py).

Why our own pytest parser rather than swebench's `parse_log_pytest`: that one keeps the *last*
status line seen per test, so a patch that prints `PASSED tests/x.py::test_y` after pytest's
real `FAILED` line (an atexit hook, a write to fd 1) flips the result. Ours keeps every status
line per test and fails closed: a test is passed only if every line about it says so. It also
reports whether pytest's final summary line (`=== 3 passed in 0.1s ===`) was seen and whether
the log shows any failure at all, for the exit-status cross-check in grading.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from polar_cli.errors import VerifyError
from polar_cli.records import TestStatus

PYTEST_PARSERS = (None, "", "parse_log_pytest", "pytest")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PYTEST_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (.+)$")
_VERBOSE_LINE = re.compile(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
_PYTEST_SUMMARY = re.compile(  # "=== 3 passed, 1 skipped in 0.12s ===" (or bare, with -q)
    r"^(=+ )?.*\b(passed|failed|errors?|skipped|xfailed|xpassed|deselected|no tests ran)\b"
    r".* in [\d.]+s\b.*?( =+)?$"
)
# pytest's words -> ours. XFAIL counts as passed and XPASS as passed, as in SWE-bench grading.
_STATUS = {
    "PASSED": TestStatus.PASSED,
    "XFAIL": TestStatus.PASSED,
    "XPASS": TestStatus.PASSED,
    "FAILED": TestStatus.FAILED,
    "ERROR": TestStatus.ERROR,
    "SKIPPED": TestStatus.SKIPPED,
}


@dataclass(frozen=True)
class ParsedLog:
    """What a log says. `statuses` is already fail-closed (see the module docstring)."""

    statuses: Mapping[str, TestStatus]
    parser: str  # "pytest" (ours) or the swebench parser name
    summary_seen: bool = True  # pytest's final summary line (always True for other parsers)
    any_failure: bool = False  # some test in the log did not pass
    conflicts: tuple[str, ...] = field(default=())  # tests reported with contradicting statuses


def _worst(old: TestStatus | None, new: TestStatus) -> TestStatus:
    if old is None or old == new:
        return new
    if TestStatus.PASSED in (old, new):
        return old if new == TestStatus.PASSED else new  # any non-pass line wins over a pass
    return old  # two different failures: keep the first


def parse_pytest(log: str) -> ParsedLog:
    """Statuses from pytest's `-rA` short summary (and `-v` style `path::test PASSED` lines)."""
    statuses: dict[str, TestStatus] = {}
    conflicts: set[str] = set()
    summary_seen = False
    for raw in log.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        m = _PYTEST_LINE.match(line)
        v = None if m else _VERBOSE_LINE.match(line)
        if m is not None:
            word, rest = m.groups()
            if word == "SKIPPED" and rest.startswith("["):
                continue  # "SKIPPED [2] path:12: reason" counts skips, it names no test
            failed = word in ("FAILED", "ERROR")
            name = rest.split(" - ")[0].strip() if failed else rest.split()[0]
        elif v is not None:
            name, word = v.groups()
        else:
            summary_seen = summary_seen or bool(_PYTEST_SUMMARY.match(line))
            continue
        status = _STATUS[word]
        old = statuses.get(name)
        if old is not None and old != status:
            conflicts.add(name)
        statuses[name] = _worst(old, status)
    any_failure = any(s in (TestStatus.FAILED, TestStatus.ERROR) for s in statuses.values())
    return ParsedLog(statuses, "pytest", summary_seen, any_failure, tuple(sorted(conflicts)))


def _swebench_parser(name: str):  # type: ignore[no-untyped-def]
    try:
        from swebench.harness.log_parsers import PARSER_REGISTRY
    except ImportError:
        raise VerifyError(
            f"log parser {name!r} comes from swebench, which is not installed: "
            "pip install swebench==5.0.2"
        ) from None
    try:
        return PARSER_REGISTRY[name]
    except KeyError:
        raise VerifyError(
            f"unknown log parser {name!r}: use parse_log_pytest or one of swebench's: "
            + ", ".join(sorted(PARSER_REGISTRY))
        ) from None


def parse_log(log: str, parser: str | None = None) -> ParsedLog:
    """Per-test statuses from a test run's log with the task's parser (None: pytest).
    VerifyError when the parser is unknown or breaks on the log."""
    if parser in PYTEST_PARSERS:
        return parse_pytest(log)
    assert parser is not None
    fn = _swebench_parser(parser)
    try:
        raw = fn(log, None)  # the Python / JS parsers ignore the test spec
    except Exception as exc:
        raise VerifyError(f"log parser {parser} failed on the test log: {exc!r}") from exc
    statuses: dict[str, TestStatus] = {}
    for name, word in raw.items():
        word = getattr(word, "value", word)
        statuses[str(name)] = _STATUS.get(str(word).upper(), TestStatus.FAILED)
    any_failure = any(s in (TestStatus.FAILED, TestStatus.ERROR) for s in statuses.values())
    return ParsedLog(statuses, parser, True, any_failure)
