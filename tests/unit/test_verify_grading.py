"""Grading and log parsing: pure functions, property-tested where the rule is a property.

The logs below are real pytest `-rA` output shapes (short summary + final summary line)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polar_cli.errors import VerifyError
from polar_cli.records import Outcome
from polar_cli.records import TestStatus as Status
from polar_cli.verify import distrust_reason, grade, parse_log
from polar_cli.verify.grading import (
    directives_for,
    is_test_path,
    patch_paths,
    protected_paths,
    tampered_configs,
)

LOG_OK = """\
============================= test session starts ==============================
platform linux -- Python 3.11.7, pytest-9.2.0, pluggy-1.6.0
rootdir: /tmp/polar/repo
collected 3 items

tests/test_a.py ..s                                                      [100%]

=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
PASSED tests/test_a.py::test_two[1-2]
SKIPPED [1] tests/test_a.py:9: no network
XFAIL tests/test_a.py::test_known - reason: flaky upstream
========================= 2 passed, 1 skipped, 1 xfailed in 0.03s =========================
"""

LOG_FAIL = """\
=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
FAILED tests/test_a.py::test_two[1-2] - AssertionError: assert 3 == 4
ERROR tests/test_b.py::test_fixture - RuntimeError: boom
========================= 1 failed, 1 passed, 1 error in 0.05s =========================
"""

STATUSES = st.sampled_from(list(Status))
NAMES = st.lists(st.text("abc_", min_size=1, max_size=6), unique=True, max_size=6)


# ----------------------------------------------------------------------------- grade


@given(f2p=NAMES, p2p=NAMES, data=st.data())
def test_grade_accepts_iff_every_graded_test_passed(f2p, p2p, data) -> None:  # type: ignore[no-untyped-def]
    statuses = {
        name: data.draw(STATUSES) for name in set(f2p) | set(p2p) if data.draw(st.booleans())
    }
    outcome, tests = grade(f2p, p2p, statuses)
    assert len(tests) == len(f2p) + len(p2p)
    every = all(statuses.get(n) == Status.PASSED for n in [*f2p, *p2p])
    assert (outcome is Outcome.ACCEPTED) == every
    assert outcome in (Outcome.ACCEPTED, Outcome.TESTS_FAILED)
    for t in tests:
        assert t.status == str(statuses.get(t.name, Status.MISSING))
        assert t.kind in ("FAIL_TO_PASS", "PASS_TO_PASS")


def test_grade_missing_test_is_not_a_pass() -> None:
    outcome, tests = grade(["t1"], ["t2"], {"t1": Status.PASSED})
    assert outcome is Outcome.TESTS_FAILED
    assert [(t.name, t.status, t.kind) for t in tests] == [
        ("t1", "passed", "FAIL_TO_PASS"),
        ("t2", "missing", "PASS_TO_PASS"),
    ]


# ----------------------------------------------------------------------------- parse_log


def test_parse_pytest_summary() -> None:
    parsed = parse_log(LOG_OK)
    assert dict(parsed.statuses) == {
        "tests/test_a.py::test_one": Status.PASSED,
        "tests/test_a.py::test_two[1-2]": Status.PASSED,
        "tests/test_a.py::test_known": Status.PASSED,  # XFAIL counts as passed (SWE-bench)
    }
    assert parsed.summary_seen and not parsed.any_failure and not parsed.conflicts
    failed = parse_log(LOG_FAIL, "parse_log_pytest")
    assert failed.statuses["tests/test_a.py::test_two[1-2]"] is Status.FAILED
    assert failed.statuses["tests/test_b.py::test_fixture"] is Status.ERROR
    assert failed.any_failure


def test_printed_passed_line_after_a_real_failure_does_not_flip_it() -> None:
    spoofed = LOG_FAIL + "PASSED tests/test_a.py::test_two[1-2]\n"
    parsed = parse_log(spoofed)
    assert parsed.statuses["tests/test_a.py::test_two[1-2]"] is Status.FAILED
    assert parsed.conflicts == ("tests/test_a.py::test_two[1-2]",)
    # swebench's own parser keeps the last line: exactly the hole ours closes
    from swebench.harness.log_parsers import PARSER_REGISTRY

    assert (
        PARSER_REGISTRY["parse_log_pytest"](spoofed, None)["tests/test_a.py::test_two[1-2]"]
        == "PASSED"
    )


def test_ansi_colours_are_ignored() -> None:
    log = "\x1b[32mPASSED\x1b[0m tests/t.py::test_x\n\x1b[32m==== 1 passed in 0.01s ====\x1b[0m\n"
    parsed = parse_log(log)
    assert parsed.statuses == {"tests/t.py::test_x": Status.PASSED} and parsed.summary_seen


def test_swebench_parser_by_name() -> None:
    log = (
        "test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests) ... ok\n"
        "test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests) ... FAIL\n"
    )
    parsed = parse_log(log, "parse_log_django")
    assert parsed.parser == "parse_log_django"
    assert parsed.statuses == {
        "test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)": Status.PASSED,
        "test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests)": Status.FAILED,
    }
    with pytest.raises(VerifyError, match="unknown log parser 'parse_log_nope'"):
        parse_log(log, "parse_log_nope")


# ----------------------------------------------------------------------------- cross-checks


def test_distrust_reason() -> None:
    assert distrust_reason(parse_log(LOG_OK), 0) is None
    assert distrust_reason(parse_log(LOG_FAIL), 1) is None  # failures explain the exit status
    no_summary = "PASSED tests/test_a.py::test_one\n"
    assert "summary line is missing" in (distrust_reason(parse_log(no_summary), 0) or "")
    assert "exited 2" in (distrust_reason(parse_log(LOG_OK), 2) or "")
    spoofed = parse_log(LOG_FAIL + "PASSED tests/test_a.py::test_two[1-2]\n")
    assert "contradicting" in (distrust_reason(spoofed, 1) or "")


def test_test_paths_and_protected_files() -> None:
    assert is_test_path("tests/test_x.py") and is_test_path("pkg/testing/util.py")
    assert is_test_path("conftest.py") and is_test_path("src/conftest.py")
    assert is_test_path("test_top.py") and is_test_path("pkg/x_test.py")
    assert not is_test_path("pkg/contest.py") and not is_test_path("pkg/attest.py")
    test_patch = (
        "diff --git a/spec/a_spec.rb b/spec/a_spec.rb\n--- a/spec/a_spec.rb\n+++ b/spec/a_spec.rb\n"
    )
    changed = ["pkg/mod.py", "spec/a_spec.rb", "suite/check_mod.py", "conftest.py", "tests/t.py"]
    ids = ["suite/check_mod.py::test_a", "test_x (module.Class)"]
    assert protected_paths(changed, test_patch, ids) == [
        "conftest.py",
        "spec/a_spec.rb",
        "suite/check_mod.py",
        "tests/t.py",
    ]
    assert directives_for(test_patch, ids) == ["spec/a_spec.rb", "suite/check_mod.py"]


def test_patch_paths_reads_git_and_plain_diffs() -> None:
    git_diff = "diff --git a/old.py b/new.py\nsimilarity index 90%\n"
    plain = (
        "--- a/x.py\t2020-01-01\n+++ b/x.py\t2020-01-02\n@@ -1 +1 @@\n--- /dev/null\n+++ b/y.py\n"
    )
    assert patch_paths(git_diff) == {"old.py", "new.py"}
    assert patch_paths(plain) == {"x.py", "y.py"}


def test_pytest_settings_added_to_shared_config_files_are_protected() -> None:
    patch = (
        "diff --git a/pyproject.toml b/pyproject.toml\n--- a/pyproject.toml\n+++ b/pyproject.toml\n"
        '@@ -1,2 +1,3 @@\n [tool.pytest.ini_options]\n+addopts = "-p pkg.hooks"\n'
        "diff --git a/setup.cfg b/setup.cfg\n--- a/setup.cfg\n+++ b/setup.cfg\n"
        "@@ -1 +1,2 @@\n [metadata]\n+version = 2\n"
    )
    assert tampered_configs(patch) == {"pyproject.toml"}
    changed = ["pyproject.toml", "setup.cfg", "pkg/hooks.py"]
    assert protected_paths(changed, "", [], patch) == ["pyproject.toml"]


def test_quiet_summary_and_failure_messages_that_look_like_summaries() -> None:
    quiet = "PASSED t.py::test_a\nFAILED t.py::test_b - assert '1 passed in 2s'\n1 failed, 1 passed in 0.02s\n"
    parsed = parse_log(quiet)
    assert parsed.summary_seen
    assert parsed.statuses["t.py::test_b"] is Status.FAILED
    assert not parse_log("PASSED t.py::test_a\n").summary_seen


def test_verbose_lines_count_too() -> None:
    log = "tests/t.py::test_a PASSED [ 50%]\ntests/t.py::test_b FAILED [100%]\n==== 1 failed, 1 passed in 0.1s ====\n"
    parsed = parse_log(log)
    assert parsed.statuses == {
        "tests/t.py::test_a": Status.PASSED,
        "tests/t.py::test_b": Status.FAILED,
    }
    spoof = "tests/t.py::test_b FAILED [100%]\n" + "PASSED tests/t.py::test_b\n"
    assert parse_log(spoof).conflicts == ("tests/t.py::test_b",)
