"""Claude Code (`@anthropic-ai/claude-code`): Anthropic Messages, a native binary.

Owns: how Claude Code is pointed at the gateway (ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY /
ANTHROPIC_MODEL, every model alias mapped to the served model), its retry / compaction /
telemetry switches, its headless command and where its session file lands.
Out of scope: the order of steps and collection (base.py), installing (install.py).

Facts (shared/reference/harnesses.md §2.3): the npm package's postinstall puts the native
binary at `bin/claude.exe` (the `.bin/claude` link), so it is launched directly, not via node.
As root, `--dangerously-skip-permissions` exits 1 unless IS_SANDBOX=1 (the runtime *is* the
sandbox). CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 stops its api.anthropic.com lookups and the
side call that titles the session (which would otherwise be captured as a model call).
"""

from __future__ import annotations

from typing import ClassVar

from polar_cli.harness.base import GatewayEndpoint, Harness, Layout

MODEL_ALIASES = (
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
)


class ClaudeCode(Harness):
    name: ClassVar[str] = "claude_code"
    package: ClassVar[str] = "@anthropic-ai/claude-code"
    default_version: ClassVar[str] = "2.1.197"
    bin_name: ClassVar[str] = "claude"
    native: ClassVar[bool] = True
    own_paths: ClassVar[tuple[str, ...]] = (".claude",)

    # ------------------------------------------------------------------ config files

    def config_dir(self, lay: Layout) -> str:
        return f"{lay.home}/.claude"

    def config_files(self, lay: Layout, endpoint: GatewayEndpoint) -> dict[str, str]:
        return {}  # everything is set through the environment

    # ------------------------------------------------------------------ environment

    def environment(self, lay: Layout, endpoint: GatewayEndpoint) -> dict[str, str]:
        env = {alias: endpoint.model for alias in MODEL_ALIASES}
        env |= {
            "ANTHROPIC_BASE_URL": endpoint.base_url.rstrip("/"),
            "ANTHROPIC_API_KEY": endpoint.key,
            "CLAUDE_CONFIG_DIR": self.config_dir(lay),
            "CLAUDE_CODE_TMPDIR": f"{lay.home}/.tmp",
            "CLAUDE_CODE_MAX_RETRIES": str(self.cfg.max_retries),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "IS_SANDBOX": "1",
        }
        if not self.cfg.auto_compaction:
            env["DISABLE_AUTO_COMPACT"] = "1"
        return env

    # ------------------------------------------------------------------ command

    def arguments(self, lay: Layout, endpoint: GatewayEndpoint, prompt: str) -> list[str]:
        return ["-p", "--dangerously-skip-permissions", "--model", endpoint.model, prompt]

    # ------------------------------------------------------------------ session file

    def session_dir(self, lay: Layout) -> str:
        return f"{self.config_dir(lay)}/projects"
