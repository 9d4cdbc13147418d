"""The project's Qwen3 chat template and the qwen3_coder-style parser."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from polar_cli.inference.template import (
    GENERATION_PROMPT,
    parse_assistant,
    render_assistant_body,
    render_prompt,
)

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
            "required": ["command"],
        },
    },
}


def test_prompt_layout_with_tools_and_tool_results() -> None:
    messages = [
        {"role": "system", "content": "You are pi."},
        {"role": "user", "content": [{"type": "text", "text": "Fix the bug"}]},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
    ]  # fmt: skip
    text = render_prompt(messages, [BASH])
    assert text.startswith("<|im_start|>system\nYou are pi.\n\n# Tools\n")
    assert "<tools>\n" + json.dumps(BASH["function"]) + "\n</tools>" in text
    assert "<|im_start|>user\nFix the bug<|im_end|>\n" in text
    assert (
        "<|im_start|>assistant\nLooking.\n\n<tool_call>\n<function=bash>\n"
        "<parameter=command>\nls\n</parameter>\n</function>\n</tool_call><|im_end|>\n"
    ) in text
    assert text.endswith(
        "<|im_start|>user\n<tool_response>\na.py\n</tool_response>\n<|im_end|>\n"
        + GENERATION_PROMPT
    )


def test_consecutive_tool_results_share_one_user_turn() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "tool", "content": "one"},
        {"role": "tool", "content": "two"},
    ]
    text = render_prompt(messages)
    assert text.count("<|im_start|>user\n") == 2
    assert (
        "<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n</tool_response>\n" in text
    )
    assert not text.startswith("<|im_start|>system")  # no tools, no system message


def test_parse_converts_parameters_by_schema_and_mints_ids() -> None:
    body = (
        "Run it.\n\n<tool_call>\n<function=bash>\n<parameter=command>\necho 1\n</parameter>\n"
        "<parameter=timeout>\n30\n</parameter>\n</function>\n</tool_call>"
    )
    msg = parse_assistant(body, [BASH])
    assert msg["content"] == "Run it."
    (call,) = msg["tool_calls"]
    assert call["id"].startswith("call_") and len(call["id"]) > 10
    assert call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == {"command": "echo 1", "timeout": 30}


def test_text_only_message_is_its_own_body() -> None:
    msg = parse_assistant("All done.")
    assert msg == {"role": "assistant", "content": "All done.", "tool_calls": None}
    assert render_assistant_body(msg) == "All done."


_text = st.text(
    alphabet=st.characters(blacklist_characters="<>", blacklist_categories=["Cs"]), max_size=40
)
_name = st.from_regex(r"[a-z][a-z_]{0,12}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(
    content=_text,
    calls=st.lists(
        st.tuples(_name, st.dictionaries(_name, _text, max_size=3)), min_size=1, max_size=3
    ),
)
def test_sampled_tool_call_bodies_render_back_exactly(
    content: str, calls: list[tuple[str, dict[str, str]]]
) -> None:
    """parse -> render is the identity on what the model samples (canonical rendering)."""
    message = {
        "role": "assistant",
        "content": content.strip(),
        "tool_calls": [
            {"type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for n, a in calls
        ],
    }
    body = render_assistant_body(message)
    parsed = parse_assistant(body)
    assert render_assistant_body(parsed) == body
    assert [c["function"]["name"] for c in parsed["tool_calls"]] == [n for n, _ in calls]
    assert [json.loads(c["function"]["arguments"]) for c in parsed["tool_calls"]] == [
        a for _, a in calls
    ]


@settings(max_examples=100, deadline=None)
@given(content=_text)
def test_sampled_text_bodies_render_back_exactly(content: str) -> None:
    assert render_assistant_body(parse_assistant(content)) == content
