"""Qwen Code (`@qwen-code/qwen-code`): OpenAI Chat Completions.

Owns: how Qwen Code is pointed at the gateway (`--auth-type openai` with OPENAI_BASE_URL /
OPENAI_API_KEY / OPENAI_MODEL), its settings file (telemetry and usage statistics off, no
auto-update, retries, compression), its headless command and where its session file lands.
Out of scope: the order of steps and collection (base.py), installing (install.py).

Facts (shared/reference/harnesses.md §2.4): the positional prompt runs one-shot (`-p` is
deprecated); `--yolo` auto-approves tools. Without `privacy.usageStatisticsEnabled: false` it
reports to an Aliyun RUM endpoint. A chatCompression threshold <= 0 turns compression off.
`generationConfig.maxRetries` bounds the OpenAI SDK's retries only: on 5xx / 429 the agent loop
itself still retries up to 7 times with backoff (not configurable in 0.15.10; ~90 s in all).
Each shell tool call first parses the command with tree-sitter (WASM), a few CPU seconds.
"""

from __future__ import annotations

from typing import ClassVar

from polar_cli.harness.base import GatewayEndpoint, Harness, Layout, dump_json


class QwenCode(Harness):
    name: ClassVar[str] = "qwen_code"
    package: ClassVar[str] = "@qwen-code/qwen-code"
    default_version: ClassVar[str] = "0.15.10"
    bin_name: ClassVar[str] = "qwen"
    own_paths: ClassVar[tuple[str, ...]] = (".qwen",)

    # ------------------------------------------------------------------ config files

    def config_files(self, lay: Layout, endpoint: GatewayEndpoint) -> dict[str, str]:
        model: dict[str, object] = {"generationConfig": {"maxRetries": self.cfg.max_retries}}
        if not self.cfg.auto_compaction:
            model["chatCompression"] = {"contextPercentageThreshold": 0}
        settings = {
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"enableAutoUpdate": False},
            "telemetry": {"enabled": False},
            "model": model,
        }
        return {f"{lay.home}/.qwen/settings.json": dump_json(settings)}

    # ------------------------------------------------------------------ environment

    def environment(self, lay: Layout, endpoint: GatewayEndpoint) -> dict[str, str]:
        return {
            "OPENAI_BASE_URL": endpoint.base_url.rstrip("/") + "/v1",
            "OPENAI_API_KEY": endpoint.key,
            "OPENAI_MODEL": endpoint.model,
        }

    # ------------------------------------------------------------------ command

    def arguments(self, lay: Layout, endpoint: GatewayEndpoint, prompt: str) -> list[str]:
        return ["--auth-type", "openai", "--yolo", "-m", endpoint.model, prompt]

    # ------------------------------------------------------------------ session file

    def session_dir(self, lay: Layout) -> str:
        return f"{lay.home}/.qwen/projects"
