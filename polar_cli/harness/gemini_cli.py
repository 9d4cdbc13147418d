"""Gemini CLI (`@google/gemini-cli`): Gemini generateContent (streamed).

Owns: how Gemini CLI is pointed at the gateway (GOOGLE_GEMINI_BASE_URL + GEMINI_API_KEY, with
the auth type pinned to "gemini-api-key" in settings), its settings file (usage statistics,
auto-update, retries, compression), its headless command and where its session file lands.
Out of scope: the order of steps and collection (base.py), installing (install.py).

Facts (shared/reference/harnesses.md §2.5): GOOGLE_GEMINI_BASE_URL alone selects the "gateway"
auth type, which headless mode rejects (exit 41), hence `security.auth.selectedType`. An
untrusted folder overrides --yolo and exits 55: `--skip-trust` (and the env switch) fix it.
`general.maxAttempts` counts attempts (retries + 1); `model.compressionThreshold` is a fraction
of the context window, 1.0 meaning compression never triggers before the window is full.
"""

from __future__ import annotations

from typing import ClassVar

from polar_cli.harness.base import GatewayEndpoint, Harness, Layout, dump_json

NO_COMPRESSION_THRESHOLD = 1.0


class GeminiCli(Harness):
    name: ClassVar[str] = "gemini_cli"
    package: ClassVar[str] = "@google/gemini-cli"
    default_version: ClassVar[str] = "0.61.0"
    bin_name: ClassVar[str] = "gemini"
    own_paths: ClassVar[tuple[str, ...]] = (".gemini",)

    # ------------------------------------------------------------------ config files

    def config_files(self, lay: Layout, endpoint: GatewayEndpoint) -> dict[str, str]:
        model: dict[str, object] = {}
        if not self.cfg.auto_compaction:
            model["compressionThreshold"] = NO_COMPRESSION_THRESHOLD
        settings = {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {
                "enableAutoUpdate": False,
                "enableAutoUpdateNotification": False,
                "maxAttempts": self.cfg.max_retries + 1,
            },
            "telemetry": {"enabled": False},
            "model": model,
        }
        return {f"{lay.home}/.gemini/settings.json": dump_json(settings)}

    # ------------------------------------------------------------------ environment

    def environment(self, lay: Layout, endpoint: GatewayEndpoint) -> dict[str, str]:
        return {
            "GOOGLE_GEMINI_BASE_URL": endpoint.base_url.rstrip("/"),
            "GEMINI_API_KEY": endpoint.key,
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }

    # ------------------------------------------------------------------ command

    def arguments(self, lay: Layout, endpoint: GatewayEndpoint, prompt: str) -> list[str]:
        return ["-m", endpoint.model, "--yolo", "--skip-trust", "-p", prompt]

    # ------------------------------------------------------------------ session file

    def session_dir(self, lay: Layout) -> str:
        return f"{lay.home}/.gemini/tmp"
