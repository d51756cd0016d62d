"""The trainer's side of the genalign vLLM server protocol over HTTP, through :mod:`genalign.remote_calls`.

:class:`HTTPServerClient` has the same methods as the server's backend (:class:`~genalign.policies.lm.engines.vllm.server.VLLMBackend`),
so the engine drives a remote server and an in-process (colocated) vLLM alike. Every request has one deadline for
connect, send and receive (``timeout_s``; a server that trickles bytes fails it too) and a cap on the answer's size.
Only the GET routes (``/health``, ``/info``), which change nothing on the server, are retried (twice, with backoff):
a POST repeated after a timeout would queue behind the first on the server's lock, or replay a step of a weight
update. Every failure raises :class:`VLLMServerError` naming the route, the kind of failure (the HTTP status and the
server's message for an error answer).
"""

from __future__ import annotations

import time
from typing import Any

from genalign.policies.lm.engines.vllm.server import ROUTES
from genalign.remote_calls import CallFailed, call_json, decode_json

#: Retries of a GET route (the POST routes are not retried), and the base of their backoff.
GET_RETRIES, GET_BACKOFF_S = 2, 0.5


class VLLMServerError(RuntimeError):
    """A request to the genalign vLLM server failed; the message names the route and the server's reason."""


def _json_object(answer: Any) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise ValueError(f"expected a JSON object, got {type(answer).__name__}")
    return answer


class HTTPServerClient:
    """JSON requests to a genalign vLLM server.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:8000``.
        timeout_s: deadline of one request, connect, send and receive together (a generation of a large batch or a
            full weight update can take minutes).
        max_response_mb: an answer larger than this (MiB) fails, read no further.
    """

    def __init__(self, url: str, *, timeout_s: float = 3600.0, max_response_mb: float = 1024.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_response_bytes = int(max_response_mb * 2**20)

    def _call(self, route: str, body: dict[str, Any] | None = None, *, timeout_s: float | None = None,
              retries: int | None = None) -> dict:  # fmt: skip
        verb = ROUTES[route][0]
        if retries is None:
            retries = GET_RETRIES if verb == "GET" else 0
        try:
            return call_json(verb, self.url + route, body or {}, timeout_s=timeout_s or self.timeout_s,
                             retries=retries, backoff_s=GET_BACKOFF_S, max_response_bytes=self.max_response_bytes,
                             parse=_json_object)  # fmt: skip
        except CallFailed as failure:
            if failure.kind != "http_status":
                raise VLLMServerError(f"{verb} {self.url}{route} failed ({failure.kind}): {failure}") from None
            try:
                reason = decode_json(failure.body).get("error", "")
            except (CallFailed, AttributeError):
                reason = ""
            raise VLLMServerError(
                f"{verb} {self.url}{route} failed with HTTP {failure.status}: {reason or failure}"
            ) from None

    def wait_until_healthy(self, wait_s: float, *, poll_s: float = 2.0) -> None:
        """Poll ``/health`` until the server answers; after ``wait_s`` seconds (0: one try) raise the last error."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self._call("/health", timeout_s=10.0, retries=0)
                return
            except VLLMServerError:
                if time.monotonic() >= deadline:
                    raise
            time.sleep(poll_s)

    # ---- the protocol (same names and arguments as the server's backend) --------------------------------------------
    def info(self) -> dict[str, Any]:
        return self._call("/info")

    def generate(
        self, prompts: list[list[int]], sampling: dict[str, Any], seeds: list[int], adapter: str | None = None
    ) -> dict[str, Any]:
        return self._call("/generate", {"prompts": prompts, "sampling": sampling, "seeds": seeds, "adapter": adapter})

    def init_weight_transfer(self, init_info: dict[str, Any]) -> dict[str, Any]:
        return self._call("/weights/init", {"init_info": init_info})

    def start_weight_update(self) -> dict[str, Any]:
        return self._call("/weights/start")

    def update_weights(self, update_info: dict[str, Any]) -> dict[str, Any]:
        return self._call("/weights/update", {"update_info": update_info})

    def finish_weight_update(self, weight_version: str) -> dict[str, Any]:
        return self._call("/weights/finish", {"weight_version": weight_version})

    def load_adapter(self, name: str, config: dict[str, Any], weights: str) -> dict[str, Any]:
        return self._call("/adapters/load", {"name": name, "config": config, "weights": weights})

    def sleep(self, level: int = 1) -> dict[str, Any]:
        return self._call("/sleep", {"level": level})

    def wake_up(self, tags: list[str] | None = None) -> dict[str, Any]:
        return self._call("/wake_up", {"tags": tags})
