"""Build the bundled demo task set from the source trees under src/.

Owns: turning each `src/<repo>/base/` tree plus its `src/<repo>/tasks.yaml` into
`repos/<repo>.bundle` (a git bundle holding the base commit) and the rows of `tasks.jsonl`
(SWE-bench shape + `snapshot` + `test_cmd`). Out of scope: loading the rows (polar_cli/tasks/).

Reproducible: fixed author / committer identity and dates, so the same sources always give the
same commit ids. For every task it derives the gold patch and the test patch with `git diff`,
then runs pytest (this interpreter's) twice -- test patch only, then test patch + gold patch --
and takes FAIL_TO_PASS = failed before and passed after, PASS_TO_PASS = passed both times. It
refuses to write a task whose gold patch does not pass every test or that has no F2P test.

Run: `python recipes/tasks/build.py [--out DIR]` (needs git and pytest; no network). `--out`
writes `DIR/tasks.jsonl` and `DIR/repos/` instead of next to this file (the reproducibility
test compares such a build with the committed files).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
# How the evaluator runs the tests: the interpreter on PATH with pytest importable (polar verify
# puts the host venv's bin/ first on PATH for local runtimes).
TEST_CMD = "python -m pytest -rA -p no:cacheprovider"
BASE_DATE = "2026-01-05T10:00:00+00:00"
NEXT_DATE = "2026-03-01T10:00:00+00:00"
IDENTITY = {
    "GIT_AUTHOR_NAME": "Polar Demo",
    "GIT_AUTHOR_EMAIL": "demo@polar.invalid",
    "GIT_COMMITTER_NAME": "Polar Demo",
    "GIT_COMMITTER_EMAIL": "demo@polar.invalid",
}
STATUS_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)")


def git(repo: Path, *args: str, date: str = BASE_DATE) -> str:
    env = {
        **os.environ,
        **IDENTITY,
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_SYSTEM": "/dev/null",
    }
    proc = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed in {repo}:\n{proc.stderr}")
    return proc.stdout


def copy_tree(src: Path, dst: Path) -> None:
    for path in sorted(src.rglob("*")):
        if "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        target = dst / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
            target.chmod(0o644)


def apply_edits(repo: Path, gold: list[dict]) -> None:
    for edit in gold:
        path = repo / edit["file"]
        text = path.read_text()
        if text.count(edit["old"]) != 1:
            raise SystemExit(f"{edit['file']}: replacement text must occur exactly once")
        path.write_text(text.replace(edit["old"], edit["new"]))


def apply_tests(repo: Path, tests: list[dict]) -> None:
    for edit in tests:
        path = repo / edit["file"]
        if "create" in edit:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(edit["create"])
        else:
            path.write_text(path.read_text() + edit["append"])


def diff(repo: Path) -> str:
    git(repo, "add", "-N", ".")
    return git(repo, "diff", "--no-color", "--no-ext-diff", "HEAD")


def reset(repo: Path) -> None:
    git(repo, "reset", "-q", "--hard", "HEAD")
    git(repo, "clean", "-q", "-fdx")


def run_tests(repo: Path) -> dict[str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        check=False,
    )
    statuses: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        m = STATUS_LINE.match(line)
        if m:
            statuses[m.group(2)] = m.group(1)
    if not statuses:
        raise SystemExit(f"no test results in {repo}:\n{proc.stdout}\n{proc.stderr}")
    return statuses


def build_repo(name: str, work: Path, repos_dir: Path) -> list[dict]:
    spec = yaml.safe_load((SRC / name / "tasks.yaml").read_text())
    repo = work / name
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    copy_tree(SRC / name / "base", repo)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", f"Initial import of {name} 0.1.0")
    base = git(repo, "rev-parse", "HEAD").strip()
    rows = []
    for task in spec:
        apply_edits(repo, task["gold"])
        patch = diff(repo)
        reset(repo)
        apply_tests(repo, task["tests"])
        test_patch = diff(repo)
        before = run_tests(repo)
        apply_edits(repo, task["gold"])
        after = run_tests(repo)
        reset(repo)
        bad = sorted(t for t, s in after.items() if s != "PASSED")
        f2p = sorted(t for t, s in after.items() if s == "PASSED" and before.get(t) != "PASSED")
        p2p = sorted(t for t, s in after.items() if s == "PASSED" and before.get(t) == "PASSED")
        if bad or not f2p:
            raise SystemExit(f"{name} task {task['number']}: gold fails {bad} or no F2P test")
        rows.append(
            {
                "instance_id": f"polar-demo__{name}-{task['number']}",
                "repo": f"polar-demo/{name}",
                "base_commit": base,
                "environment_setup_commit": base,
                "version": "0.1",
                "created_at": task["created_at"],
                "problem_statement": task["problem_statement"],
                "hints_text": task.get("hints_text", ""),
                "patch": patch,
                "test_patch": test_patch,
                "FAIL_TO_PASS": json.dumps(f2p),
                "PASS_TO_PASS": json.dumps(p2p),
                "test_cmd": TEST_CMD,
                "snapshot": f"repos/{name}.bundle",
            }
        )
    # Later upstream history (a version bump), so a runtime must really check out base_commit.
    init = repo / name / "__init__.py"
    init.write_text(init.read_text().replace('"0.1.0"', '"0.2.0.dev0"'))
    git(repo, "commit", "-q", "-am", "Start 0.2.0 development", date=NEXT_DATE)
    repos_dir.mkdir(parents=True, exist_ok=True)
    bundle = repos_dir / f"{name}.bundle"
    bundle.unlink(missing_ok=True)
    git(repo, "bundle", "create", "-q", str(bundle), "HEAD", "main")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="where tasks.jsonl + repos/ go")
    out = parser.parse_args().out.resolve()
    names = sorted(p.name for p in SRC.iterdir() if (p / "tasks.yaml").is_file())
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="polar-demo-build-") as tmp:
        for name in names:
            rows.extend(build_repo(name, Path(tmp), out / "repos"))
            print(f"{name}: {sum(r['repo'].endswith('/' + name) for r in rows)} tasks")
    with (out / "tasks.jsonl").open("w") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True) + "\n")
    shutil.rmtree(HERE / ".pytest_cache", ignore_errors=True)
    print(f"wrote {len(rows)} tasks to {out / 'tasks.jsonl'}")


if __name__ == "__main__":
    main()
