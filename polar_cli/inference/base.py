"""The InferenceBackend seam: what the gateway calls and the pipeline starts.

Owns: the protocol every backend (sglang, external, scripted) implements.
Out of scope: HTTP serving to harnesses (gateway/), choosing a backend (pipeline/, cli).
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, Self

from polar_cli.records import ChatRequest, ChatResult


class InferenceBackend(Protocol):
    """An async context manager: entering starts (or connects to) the server and waits until it
    really generates; leaving stops whatever it started. While entered:

    - `base_url` is the server's HTTP base URL (SGLang's protocol subset);
    - `model` is the model name to send upstream;
    - `chat()` makes one token-faithful, non-streaming call. It raises UpstreamError
      (ContextOverflowError for a prompt that does not fit) and never returns partial results;
    - `eot_id` is the model's end-of-turn token id (reconstruction's EOT; Qwen `<|im_end|>`);
    - `gpus` is how many GPUs serve the model, for GPU-hour accounting (0 for the stand-in).
    """

    base_url: str
    model: str
    eot_id: int
    gpus: int

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def chat(self, request: ChatRequest) -> ChatResult: ...

    async def abort(self, call_id: str) -> None:
        """Abort an in-flight call (client went away). Best effort, never raises."""
        ...
