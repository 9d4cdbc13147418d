"""verify: the fresh-runtime evaluator (I/O) and grading (pure) -- see DESIGN.md.

Owns: `evaluate(runtime, task, patch, *, timeout_s, test_cmd=None, env=None) -> Evaluation`
(evaluate.py), `grade(f2p, p2p, statuses) -> (Outcome, tests)` and the log cross-checks
(grading.py), `parse_log(log, parser) -> ParsedLog` (logs.py).
Out of scope: opening runtimes (the caller uses polar_cli.runtime.open_runtime with a fresh
RuntimeSpec(purpose="eval")), choosing which patch to verify (pipeline/).
Imports only the runtime *protocol* (runtime/base.py), never a backend.
"""

from __future__ import annotations

from polar_cli.verify.evaluate import DEFAULT_TEST_CMD, Evaluation, evaluate
from polar_cli.verify.grading import distrust_reason, grade
from polar_cli.verify.logs import ParsedLog, parse_log

__all__ = [
    "DEFAULT_TEST_CMD",
    "Evaluation",
    "ParsedLog",
    "distrust_reason",
    "evaluate",
    "grade",
    "parse_log",
]
