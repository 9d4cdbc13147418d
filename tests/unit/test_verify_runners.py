"""Which command and parser run a task's tests; the shell line, run for real with bash."""

from __future__ import annotations

import subprocess
from pathlib import Path

from polar_cli.records import Task
from polar_cli.verify.runners import DEFAULT_TEST_CMD, runner_for, shell_line, targets


def task(repo: str = "o/r", **kw: object) -> Task:
    return Task(instance_id="o__r-1", repo=repo, base_commit="abc", problem_statement="x", **kw)  # type: ignore[arg-type]


def test_precedence_row_then_table_then_fallback() -> None:
    own = runner_for(task(test_cmd="pytest -x -rA", log_parser="parse_log_pytest_v2"), "tox")
    assert (own.test_cmd, own.log_parser) == ("pytest -x -rA", "parse_log_pytest_v2")
    django = runner_for(task("django/django"), "pytest -rA")
    assert (
        django.test_cmd.startswith("./tests/runtests.py")
        and django.log_parser == "parse_log_django"
    )
    sympy = runner_for(task("sympy/sympy"))
    assert sympy.test_cmd == "bin/test -C --verbose" and sympy.log_parser == "parse_log_sympy"
    assert runner_for(task(), "python -m pytest").test_cmd == "python -m pytest"
    assert runner_for(task()).test_cmd == DEFAULT_TEST_CMD and runner_for(task()).log_parser is None


def test_django_targets_are_dotted_modules() -> None:
    runner = runner_for(task("django/django"))
    files = ["tests/auth_tests/test_validators.py", "tests/forms_tests/widget_tests/test_input.py"]
    assert targets(runner, files) == [
        "auth_tests.test_validators",
        "forms_tests.widget_tests.test_input",
    ]
    assert targets(runner_for(task()), files) == files


def test_shell_line_runs_the_command_with_quoted_targets(tmp_path: Path) -> None:
    (tmp_path / "a b.txt").write_text("hello\n")
    line = shell_line(runner_for(task(test_cmd="cat")), ["a b.txt"])
    proc = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == "hello\n"
    missing = shell_line(runner_for(task(test_cmd="cat")), ["nope.txt"])
    proc = subprocess.run(["bash", "-c", missing], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 1 and "nope.txt" in proc.stdout and proc.stderr == ""  # 2>&1
