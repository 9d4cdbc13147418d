"""pi (`@mariozechner/pi-coding-agent`), the default harness.

Owns: how pi is pointed at the gateway (a custom `polar` provider in
`$PI_CODING_AGENT_DIR/models.json`, selected with --provider/--model), its settings (retries,
auto-compaction), its headless command and where its session file lands.
Out of scope: the order of steps and collection (base.py), installing (install.py).

Facts (shared/reference/harnesses.md §2.1): `-p` prints the final text and exits 1 on a model
error, while `--mode json` exits 0 even then, so `-p` is used. The provider's `api` field picks
the wire protocol; each client appends its own suffix to `baseUrl`. `apiKey` names an env var,
so the session key never lands in a file. `-p` makes no network lookups, PI_OFFLINE is set anyway.
"""

from __future__ import annotations

from typing import ClassVar

from polar_cli.errors import RecipeError
from polar_cli.harness.base import KEY_ENV, GatewayEndpoint, Harness, Layout, dump_json

PROVIDER = "polar"
DEFAULT_API = "openai-completions"
# api kind -> what follows the gateway root in `baseUrl` (harnesses.md, "What each API kind sends")
API_BASE_SUFFIX = {
    "openai-completions": "/v1",
    "openai-responses": "/v1",
    "anthropic-messages": "",
    "google-generative-ai": "/v1beta",
}


class Pi(Harness):
    name: ClassVar[str] = "pi"
    package: ClassVar[str] = "@mariozechner/pi-coding-agent"
    default_version: ClassVar[str] = "0.73.1"
    bin_name: ClassVar[str] = "pi"
    own_paths: ClassVar[tuple[str, ...]] = (".pi",)

    # ------------------------------------------------------------------ config files

    @property
    def api(self) -> str:
        api = self.cfg.api or DEFAULT_API
        if api not in API_BASE_SUFFIX:
            raise RecipeError(
                f"harness.api: unknown pi api {api!r}; valid: {', '.join(API_BASE_SUFFIX)}"
            )
        return api

    def agent_dir(self, lay: Layout) -> str:
        return f"{lay.home}/.pi/agent"

    def config_files(self, lay: Layout, endpoint: GatewayEndpoint) -> dict[str, str]:
        base_url = endpoint.base_url.rstrip("/") + API_BASE_SUFFIX[self.api]
        models = {
            "providers": {
                PROVIDER: {
                    "baseUrl": base_url,
                    "api": self.api,
                    "apiKey": KEY_ENV,
                    "models": [{"id": endpoint.model}],
                }
            }
        }
        retries = self.cfg.max_retries
        settings = {
            "defaultProvider": PROVIDER,
            "defaultModel": endpoint.model,
            "compaction": {"enabled": self.cfg.auto_compaction},
            "retry": {
                "enabled": retries > 0,
                "maxRetries": retries,
                "provider": {"maxRetries": retries},
            },
        }
        agent = self.agent_dir(lay)
        return {
            f"{agent}/models.json": dump_json(models),
            f"{agent}/settings.json": dump_json(settings),
        }

    # ------------------------------------------------------------------ environment

    def environment(self, lay: Layout, endpoint: GatewayEndpoint) -> dict[str, str]:
        return {
            KEY_ENV: endpoint.key,
            "PI_CODING_AGENT_DIR": self.agent_dir(lay),
            "PI_CODING_AGENT_SESSION_DIR": self.session_dir(lay),
            "PI_OFFLINE": "1",
            "PI_SKIP_VERSION_CHECK": "1",
            "PI_TELEMETRY": "0",
        }

    # ------------------------------------------------------------------ command

    def arguments(self, lay: Layout, endpoint: GatewayEndpoint, prompt: str) -> list[str]:
        return ["-p", "--provider", PROVIDER, "--model", endpoint.model, prompt]

    # ------------------------------------------------------------------ session file

    def session_dir(self, lay: Layout) -> str:
        return f"{self.agent_dir(lay)}/sessions"
