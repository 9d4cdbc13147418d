"""Codex CLI (`@openai/codex`): OpenAI Responses only.

Owns: how codex is pointed at the gateway (a custom `polar` provider in `$CODEX_HOME/config.toml`
with `wire_api = "responses"` and the key read from an env var), its retry / compaction /
telemetry settings, its headless command and where its rollout (session) file lands.
Out of scope: the order of steps and collection (base.py), installing (install.py).

Facts (shared/reference/harnesses.md §2.2): the built-in `openai` provider ignores
OPENAI_BASE_URL, tries WebSockets and sends no key, so a custom provider is used.
`wire_api = "chat"` is a config error. Without `--skip-git-repo-check` it refuses the directory;
it reads stdin when it is not a TTY (the runtime gives it /dev/null). `-c analytics.enabled=false`
and `--disable plugins` remove its lookups of chatgpt.com / github.com.
"""

from __future__ import annotations

import json
from typing import ClassVar

from polar_cli.harness.base import KEY_ENV, GatewayEndpoint, Harness, Layout

PROVIDER = "polar"
NO_COMPACTION_TOKENS = 10**15  # model_auto_compact_token_limit that is never reached


def _toml(value: object) -> str:
    """A TOML scalar (strings as JSON strings: a valid TOML basic string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value))


class Codex(Harness):
    name: ClassVar[str] = "codex"
    package: ClassVar[str] = "@openai/codex"
    default_version: ClassVar[str] = "0.171.0"
    bin_name: ClassVar[str] = "codex"
    own_paths: ClassVar[tuple[str, ...]] = (".codex",)

    # ------------------------------------------------------------------ config files

    def codex_home(self, lay: Layout) -> str:
        return f"{lay.home}/.codex"

    def config_files(self, lay: Layout, endpoint: GatewayEndpoint) -> dict[str, str]:
        top: dict[str, object] = {
            "model": endpoint.model,
            "model_provider": PROVIDER,
            "check_for_update_on_startup": False,
        }
        if not self.cfg.auto_compaction:
            top["model_auto_compact_token_limit"] = NO_COMPACTION_TOKENS
        provider: dict[str, object] = {
            "name": PROVIDER,
            "base_url": endpoint.base_url.rstrip("/") + "/v1",
            "env_key": KEY_ENV,
            "wire_api": "responses",
            "request_max_retries": self.cfg.max_retries,
            "stream_max_retries": self.cfg.max_retries,
        }
        lines = [f"{k} = {_toml(v)}" for k, v in top.items()]
        lines += ["", "[analytics]", "enabled = false", ""]
        lines += [f"[model_providers.{PROVIDER}]"]
        lines += [f"{k} = {_toml(v)}" for k, v in provider.items()]
        return {f"{self.codex_home(lay)}/config.toml": "\n".join(lines) + "\n"}

    # ------------------------------------------------------------------ environment

    def environment(self, lay: Layout, endpoint: GatewayEndpoint) -> dict[str, str]:
        return {KEY_ENV: endpoint.key, "CODEX_HOME": self.codex_home(lay)}

    # ------------------------------------------------------------------ command

    def arguments(self, lay: Layout, endpoint: GatewayEndpoint, prompt: str) -> list[str]:
        return [
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "-c",
            "analytics.enabled=false",
            "--disable",
            "plugins",
            prompt,
        ]

    # ------------------------------------------------------------------ session file

    def session_dir(self, lay: Layout) -> str:
        return f"{self.codex_home(lay)}/sessions"
