"""A harness's large completion budget is fitted to the context instead of failing the call;
a prompt that does not fit at all is still a context overflow."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from polar_cli.errors import ContextOverflowError
from polar_cli.inference import open_backend
from polar_cli.inference.client import fitted_budget
from polar_cli.recipe.schema import ScriptedInference
from polar_cli.records import ChatRequest

SGLANG_MSG = (
    "Requested token count exceeds the model's maximum context length of 1000 tokens. You "
    "requested a total of 16684 tokens: 300 tokens from the input messages and 16384 tokens for "
    "the completion. Please reduce the number of tokens in the input messages or the completion "
    "to fit within the limit."
)


def test_fitted_budget_parses_sglangs_message() -> None:
    assert fitted_budget(SGLANG_MSG) == 699
    assert (
        fitted_budget("The input (1200 tokens) is longer than the model's context length") is None
    )
    assert fitted_budget(SGLANG_MSG.replace("300 tokens from", "999 tokens from")) is None


def request(text: str, max_tokens: int) -> ChatRequest:
    return ChatRequest(
        call_id="c1",
        model="m",
        session_id="s",
        instance_id="i",
        messages=[{"role": "user", "content": text}],
        params={"max_completion_tokens": max_tokens},
    )


def test_scripted_call_with_an_oversized_budget_succeeds(tmp_path: Path) -> None:
    cfg = ScriptedInference(policies={"noop": 1.0}, context_length=512)

    async def main() -> None:
        async with open_backend(cfg, run_dir=tmp_path) as backend:
            ok = await backend.chat(request("hello", 16384))
            assert ok.response_ids and len(ok.prompt_ids) + len(ok.response_ids) < 512
            with pytest.raises(ContextOverflowError):
                await backend.chat(request("word " * 2000, 16384))

    asyncio.run(main())


def test_matched_stop_is_carried_from_sglangs_answer() -> None:
    from polar_cli.inference.client import parse_result

    def answer(choice_extra: dict, meta_extra: dict) -> dict:
        return {
            "choices": [
                {
                    "message": {"role": "assistant", "content": "hi"},
                    "finish_reason": "stop",
                    "prompt_token_ids": [1, 2],
                    "meta_info": {"output_token_logprobs": [[-0.1, 5, None]], **meta_extra},
                    **choice_extra,
                }
            ]
        }

    assert parse_result(answer({"matched_stop": "</end>"}, {}), "m").matched_stop == "</end>"
    meta = {"finish_reason": {"type": "stop", "matched": 151645}}
    assert parse_result(answer({}, meta), "m").matched_stop == 151645
    assert parse_result(answer({}, {}), "m").matched_stop is None
