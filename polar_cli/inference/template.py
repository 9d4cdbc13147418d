"""The project's Qwen3 chat template and the qwen3_coder tool-call parser, for the stand-in.

Owns: rendering OpenAI-chat messages + tools to the Qwen3 prompt text
(`<|im_start|>role\\n...<|im_end|>\\n`, tools in the system turn inside `<tools></tools>`,
assistant tool calls in the Qwen3-Coder XML form, tool results as user turns wrapped in
`<tool_response>`, generation prompt `<|im_start|>assistant\\n`), rendering an assistant turn's
body (what the model samples), and parsing a sampled body back into a message the way SGLang's
`qwen3_coder` parser does.
Out of scope: tokenisation (tokenizer.py), choosing what to say (policy.py).

The key property: for any message that `parse_assistant()` produced,
`render_assistant_body(parse_assistant(body)) == body`, so a sampled turn that comes back in the
next prompt renders to exactly the sampled text (and, tokenised, the sampled ids unless drift
was applied). Historical `reasoning_content` is not rendered (Qwen3 drops it from past turns;
the scripted policy never emits any).
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

from polar_cli.records import content_text

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
GENERATION_PROMPT = f"{IM_START}assistant\n"

_TOOLS_PREAMBLE = "# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
_TOOLS_POSTAMBLE = (
    "\n</tools>\n\n"
    "If you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n</function>\n</tool_call>"
)

_TOOL_CALL_RE = re.compile(r"<tool_call>\n?(.*?)\n?</tool_call>", re.DOTALL)
_FUNCTION_RE = re.compile(r"<function=([^>\n]+)>\n?(.*?)</function>", re.DOTALL)
_PARAM_RE = re.compile(r"<parameter=([^>\n]+)>\n(.*?)\n</parameter>", re.DOTALL)


def _tool_function(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool.get("function")
    return fn if isinstance(fn, dict) else tool


def _render_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _arguments(call: dict[str, Any]) -> dict[str, Any]:
    fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else call
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return {"arguments": args}
    return args if isinstance(args, dict) else {"arguments": args}


def render_tool_call(name: str, arguments: dict[str, Any]) -> str:
    params = "".join(
        f"<parameter={k}>\n{_render_value(v)}\n</parameter>\n" for k, v in arguments.items()
    )
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def render_assistant_body(message: dict[str, Any]) -> str:
    """What follows the generation prompt for this assistant turn, without `<|im_end|>`."""
    text = content_text(message.get("content"))
    calls = message.get("tool_calls") or []
    if not calls:
        return text
    blocks = []
    for call in calls:
        fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else call
        blocks.append(render_tool_call(str(fn.get("name", "")), _arguments(call)))
    lead = text.strip() + "\n\n" if text.strip() else ""
    return lead + "\n".join(blocks)


def render_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """The full prompt text for `messages`, ending with the generation prompt."""
    out: list[str] = []
    msgs = list(messages)
    system = ""
    if msgs and msgs[0].get("role") in ("system", "developer"):
        system = content_text(msgs.pop(0).get("content"))
    if tools:
        lines = "\n".join(json.dumps(_tool_function(t), ensure_ascii=False) for t in tools)
        lead = system + "\n\n" if system else ""
        out.append(f"{IM_START}system\n{lead}{_TOOLS_PREAMBLE}{lines}{_TOOLS_POSTAMBLE}{IM_END}\n")
    elif system:
        out.append(f"{IM_START}system\n{system}{IM_END}\n")
    for i, msg in enumerate(msgs):
        role = msg.get("role")
        if role == "tool":
            if i == 0 or msgs[i - 1].get("role") != "tool":
                out.append(f"{IM_START}user\n")
            out.append(f"<tool_response>\n{content_text(msg.get('content'))}\n</tool_response>\n")
            if i == len(msgs) - 1 or msgs[i + 1].get("role") != "tool":
                out.append(f"{IM_END}\n")
        elif role == "assistant":
            out.append(f"{GENERATION_PROMPT}{render_assistant_body(msg)}{IM_END}\n")
        else:  # user, and any later system/developer message
            r = "system" if role in ("system", "developer") else "user"
            out.append(f"{IM_START}{r}\n{content_text(msg.get('content'))}{IM_END}\n")
    out.append(GENERATION_PROMPT)
    return "".join(out)


def _param_types(tools: list[dict[str, Any]] | None, name: str) -> dict[str, Any]:
    for tool in tools or []:
        fn = _tool_function(tool)
        if fn.get("name") == name:
            props = (fn.get("parameters") or fn.get("parametersJsonSchema") or {}).get(
                "properties", {}
            )
            return {k: (v or {}).get("type") for k, v in props.items() if isinstance(v, dict)}
    return {}


def _convert(value: str, typ: Any) -> Any:
    if typ in (None, "string") or (isinstance(typ, list) and "string" in typ):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def new_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


def parse_assistant(body: str, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Parse sampled text (without `<|im_end|>`) into an OpenAI-chat assistant message.

    Like SGLang's qwen3_coder detector: text before the first `<tool_call>` is the content
    (stripped), each `<function=NAME>` block becomes a tool call whose parameters are converted by
    the tool's JSON schema types and serialised as a JSON string; ids are `call_<hex>`.
    """
    start = body.find("<tool_call>")
    if start < 0:
        return {"role": "assistant", "content": body, "tool_calls": None}
    calls = []
    for block in _TOOL_CALL_RE.findall(body[start:]):
        for name, inner in _FUNCTION_RE.findall(block):
            types = _param_types(tools, name)
            args = {k: _convert(v, types.get(k)) for k, v in _PARAM_RE.findall(inner)}
            calls.append(
                {
                    "id": new_call_id(),
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
                }
            )
    content = body[:start].strip()
    return {"role": "assistant", "content": content or None, "tool_calls": calls or None}
