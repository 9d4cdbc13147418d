"""Trajectory reconstruction: captured model calls -> trainer-facing traces (pure functions).

Owns: the three modes of DESIGN.md "Prefix merging" (per_request, exact, polar), per-trace
`exact_context` / `drift_boundaries` and per-run statistics.
Out of scope: reading completion files and writing Parquet (pipeline/, dataset/).

Public API::

    reconstruct_session(completions, *, mode, eot_id) -> Reconstruction  # one session
    reconstruct_all(completions, *, mode, eot_id) -> Reconstruction  # groups by session_id
    Reconstruction(traces: list[Trace], stats: ReconstructStats)  # stats add with `+`

`mode` is "per_request", "exact" (the recipe's default) or "polar"; `eot_id` the end-of-turn
token id (QWEN_EOT_ID for Qwen models).
"""

from polar_cli.reconstruct.builder import reconstruct_all, reconstruct_session
from polar_cli.reconstruct.result import MergeMode, Reconstruction, ReconstructStats

QWEN_EOT_ID = 151645  # Qwen `<|im_end|>`, the CLI's default end-of-turn id

__all__ = [
    "QWEN_EOT_ID",
    "MergeMode",
    "ReconstructStats",
    "Reconstruction",
    "reconstruct_all",
    "reconstruct_session",
]
