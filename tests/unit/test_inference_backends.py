"""The backend factory, the launch command line, GPU accounting and end-of-turn ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polar_cli.errors import RecipeError
from polar_cli.inference import open_backend
from polar_cli.inference.eot import eot_id_for
from polar_cli.inference.external import ExternalBackend
from polar_cli.inference.scripted import ScriptedBackend
from polar_cli.inference.sglang import SGLangBackend, launch_command
from polar_cli.recipe.schema import ExternalInference, ScriptedInference, SGLangInference


def test_factory_picks_the_backend_by_kind(tmp_path: Path) -> None:
    sg = open_backend(SGLangInference(model_path="m", tp_size=4), run_dir=tmp_path)
    assert isinstance(sg, SGLangBackend) and sg.gpus == 4 and sg.log_path.parent == tmp_path
    sg8 = open_backend(SGLangInference(model_path="m", gpus_per_node=8), run_dir=tmp_path)
    assert sg8.gpus == 8
    ext = open_backend(ExternalInference(url="http://h:1"), run_dir=tmp_path)
    assert isinstance(ext, ExternalBackend) and ext.gpus == 0
    sc = open_backend(ScriptedInference(), run_dir=tmp_path)
    assert isinstance(sc, ScriptedBackend) and sc.gpus == 0 and sc.eot_id == 151645


def test_factory_rejects_an_unknown_kind(tmp_path: Path) -> None:
    class Odd:
        kind = "vllm"

    with pytest.raises(RecipeError, match="valid: sglang, external, scripted"):
        open_backend(Odd(), run_dir=tmp_path)  # type: ignore[arg-type]


def test_launch_command_carries_every_recipe_field() -> None:
    cfg = SGLangInference(
        model_path="/models/Qwen3.5-122B-A10B", served_model_name="q", tp_size=8,
        context_length=65536, host="0.0.0.0", mem_fraction_static=0.85, python="/opt/py",
        reasoning_parser=None, extra_args=["--enable-metrics", "--chunked-prefill-size", "8192"],
    )  # fmt: skip
    assert launch_command(cfg, 31000) == [
        "/opt/py", "-m", "sglang.launch_server", "--model-path", "/models/Qwen3.5-122B-A10B",
        "--tp-size", "8", "--context-length", "65536", "--host", "0.0.0.0", "--port", "31000",
        "--served-model-name", "q", "--tool-call-parser", "qwen3_coder",
        "--mem-fraction-static", "0.85", "--enable-metrics", "--chunked-prefill-size", "8192",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "eot"),
    [
        ("Qwen/Qwen3-8B", 151645),
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", 151645),
        ("Qwen/Qwen3.5-122B-A10B", 248046),
        ("Qwen/Qwen3.6-35B", 248046),
        ("meta-llama/Llama-3.1-8B-Instruct", 128009),
    ],
)
def test_eot_id_by_model_family(name: str, eot: int) -> None:
    assert eot_id_for(name) == eot


def test_eot_id_from_a_local_model_directory(tmp_path: Path) -> None:
    tok = {
        "added_tokens": [{"id": 5, "content": "<|endoftext|>"}, {"id": 7, "content": "<|im_end|>"}]
    }
    (tmp_path / "tokenizer.json").write_text(json.dumps(tok))
    assert eot_id_for(str(tmp_path)) == 7
    other = tmp_path / "other"
    other.mkdir()
    (other / "generation_config.json").write_text(json.dumps({"eos_token_id": [42, 43]}))
    assert eot_id_for(str(other)) == 42
    assert SGLangBackend(SGLangInference(model_path=str(tmp_path)), run_dir=tmp_path).eot_id == 7
