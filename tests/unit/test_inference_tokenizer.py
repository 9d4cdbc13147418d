"""The offline Qwen tokenizer: real ids, special tokens, atomic cache build."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from polar_cli.inference.tokenizer import load_tokenizer, special_id, tokenizer_path

QWEN3_SPECIALS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<tool_call>": 151657,
    "</tool_call>": 151658,
    "<tool_response>": 151665,
    "</tool_response>": 151666,
    "<think>": 151667,
    "</think>": 151668,
}


def test_qwen3_special_token_ids() -> None:
    tok = load_tokenizer("qwen3")
    for text, tid in QWEN3_SPECIALS.items():
        assert special_id(tok, text) == tid
    assert tok.get_vocab_size(with_added_tokens=True) == 151669


def test_qwen35_vocabulary_size_and_eot() -> None:
    tok = load_tokenizer("qwen3.5")
    assert tok.get_vocab_size(with_added_tokens=True) == 248077
    assert special_id(tok, "<|im_end|>") == 248046


def test_known_qwen_ids_for_plain_text() -> None:
    # Ids of the real Qwen2/2.5/3 vocabulary ("Hello" 9707, " world" 1879, "\n" 198,
    # digits one per token), with the chat markers as single special tokens.
    tok = load_tokenizer("qwen3")
    ids = tok.encode("<|im_start|>user\nHello world 42<|im_end|>\n", add_special_tokens=False).ids
    assert ids == [151644, 872, 198, 9707, 1879, 220, 19, 17, 151645, 198]


@pytest.mark.parametrize(
    "text",
    [
        "def f(x):\n    return x ** 2  # square\n",
        "naïve café — ünïcödé ✓ 你好，世界 🙂",
        "<tool_call>\n<function=bash>\n<parameter=command>\nls -la\n</parameter>\n</function>\n</tool_call><|im_end|>",
        "   leading and trailing spaces   \n\n\t",
    ],
)
def test_round_trip(text: str) -> None:
    tok = load_tokenizer("qwen3")
    ids = tok.encode(text, add_special_tokens=False).ids
    assert tok.decode(ids, skip_special_tokens=False) == text


@pytest.mark.slow
def test_concurrent_builds_leave_one_valid_file(tmp_path: Path) -> None:
    """Two processes building the same cache at once both succeed; the file loads."""
    code = (
        "import sys; from pathlib import Path; "
        "from polar_cli.inference.tokenizer import build_tokenizer_json; "
        "print(build_tokenizer_json('qwen3', Path(sys.argv[1])))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE)
        for _ in range(2)
    ]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        assert out.decode().strip() == str(tokenizer_path("qwen3", tmp_path))
    leftovers = [p.name for p in (tmp_path / "qwen3").iterdir() if p.name != "tokenizer.json"]
    assert leftovers == []
    tok = load_tokenizer("qwen3", tmp_path)
    assert special_id(tok, "<|im_end|>") == 151645


def test_loading_a_built_cache_does_not_import_transformers(tmp_path: Path) -> None:
    load_tokenizer("qwen3")  # make sure the default cache exists
    code = (
        "import sys; from polar_cli.inference.tokenizer import load_tokenizer; "
        "load_tokenizer('qwen3'); print('transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
