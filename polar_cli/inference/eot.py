"""End-of-turn token ids: which id closes an assistant turn for a given model.

Owns: deriving the end-of-turn id reconstruction needs (DESIGN.md, Prefix merging) from a local
model directory's tokenizer / generation config, or else from the model family named in the
model path.
Out of scope: tokenisation (tokenizer.py).

Order for a local directory: the id of a ChatML `<|im_end|>` (or Llama-3 `<|eot_id|>`) in
tokenizer.json / tokenizer_config.json; else the first `eos_token_id` of generation_config.json,
then config.json. Without a local directory, by family: Qwen3.5/3.6 -> 248046, other Qwen
(2/2.5/3, Qwen3-Coder) -> 151645, Llama-3 -> 128009; anything else falls back to Qwen3's 151645
(set `reconstruct.eot_id` in the recipe for another family).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

QWEN3_EOT_ID = 151645
QWEN35_EOT_ID = 248046
LLAMA3_EOT_ID = 128009
_EOT_TOKENS = ("<|im_end|>", "<|eot_id|>")
_QWEN35_RE = re.compile(r"qwen3[._-]?[56]", re.IGNORECASE)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _from_tokenizer_files(root: Path) -> int | None:
    data = _read_json(root / "tokenizer.json")
    if isinstance(data, dict):
        for tok in data.get("added_tokens") or []:
            if isinstance(tok, dict) and tok.get("content") in _EOT_TOKENS:
                return int(tok["id"])
    data = _read_json(root / "tokenizer_config.json")
    if isinstance(data, dict):
        for tid, tok in (data.get("added_tokens_decoder") or {}).items():
            if isinstance(tok, dict) and tok.get("content") in _EOT_TOKENS:
                return int(tid)
    return None


def _from_configs(root: Path) -> int | None:
    for name in ("generation_config.json", "config.json"):
        data = _read_json(root / name)
        if not isinstance(data, dict):
            continue
        eos = data.get("eos_token_id")
        if isinstance(eos, list) and eos:
            eos = eos[0]
        if isinstance(eos, int):
            return eos
    return None


def eot_id_for(model_path: str) -> int:
    """The end-of-turn id for `model_path` (a local directory or an HF model id / name)."""
    root = Path(model_path).expanduser()
    if root.is_dir():
        found = _from_tokenizer_files(root)
        if found is None:
            found = _from_configs(root)
        if found is not None:
            return found
    name = model_path.lower()
    if _QWEN35_RE.search(name):
        return QWEN35_EOT_ID
    if "llama-3" in name or "llama3" in name:
        return LLAMA3_EOT_ID
    return QWEN3_EOT_ID
