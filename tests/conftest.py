"""Shared test helpers. Tests fake only the edges (model, tokenizer, sandbox, harness) and keep
everything between them real."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def polar_argv() -> list[str]:
    """argv prefix that runs the `polar` CLI of this checkout in a subprocess."""
    return [sys.executable, "-m", "polar_cli.cli"]


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests talk to loopback only; a proxy variable from the host must not reroute them.
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
