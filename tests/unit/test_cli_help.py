"""`polar --help` must stay fast: it may not import the heavy parts of the stack (the way
SWE-bench tests that `import swebench` is cheap)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "sglang",
    "litellm",
    "transformers",
    "datasets",
    "pyarrow",
    "torch",
    "swebench",
    "tokenizers",
)

PROBE = """
import json, sys
sys.argv = ["polar", "--help"]
from polar_cli import cli
try:
    cli.main()
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)), file=sys.stderr)
"""


def _imported_heavy(args: list[str]) -> list[str]:
    code = f"HEAVY = {HEAVY!r}\n" + PROBE.replace('["polar", "--help"]', repr(["polar", *args]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "Usage" in proc.stdout, proc.stdout + proc.stderr
    return json.loads(proc.stderr.strip().splitlines()[-1])


def test_help_imports_no_heavy_module() -> None:
    assert _imported_heavy(["--help"]) == []


def test_every_subcommand_help_imports_no_heavy_module() -> None:
    import typer.main

    from polar_cli.cli import app

    group = typer.main.get_command(app)
    names = sorted(group.commands)  # type: ignore[attr-defined]
    assert "recipe" in names
    for name in names:
        assert _imported_heavy([name, "--help"]) == [], name
