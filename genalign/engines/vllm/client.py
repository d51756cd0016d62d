"""The trainer's side of the genalign vLLM server protocol over HTTP, with the standard library only.

:class:`HTTPServerClient` has the same methods as the server's backend (:class:`~genalign.engines.vllm.server.VLLMBackend`),
so the engine drives a remote server and an in-process (colocated) vLLM alike. Every failure raises
:class:`VLLMServerError` naming the route, the HTTP status and the server's message.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from genalign.engines.vllm.server import ROUTES


class VLLMServerError(RuntimeError):
    """A request to the genalign vLLM server failed; the message names the route and the server's reason."""


class HTTPServerClient:
    """JSON requests to a genalign vLLM server.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:8000``.
        timeout_s: limit for one request (a generation of a large batch or a full weight update can take minutes).
    """

    def __init__(self, url: str, *, timeout_s: float = 3600.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _call(self, route: str, body: dict[str, Any] | None = None, *, timeout_s: float | None = None) -> dict:
        verb = ROUTES[route][0]
        data = json.dumps(body or {}).encode() if verb == "POST" else None
        request = urllib.request.Request(
            self.url + route, data=data, method=verb, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as err:
            try:
                reason = json.loads(err.read()).get("error", "")
            except (json.JSONDecodeError, AttributeError):
                reason = ""
            raise VLLMServerError(
                f"{verb} {self.url}{route} failed with HTTP {err.code}: {reason or err.reason}"
            ) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
            reason = getattr(err, "reason", err)
            raise VLLMServerError(f"{verb} {self.url}{route} failed: {reason}") from None

    def wait_until_healthy(self, wait_s: float, *, poll_s: float = 2.0) -> None:
        """Poll ``/health`` until the server answers; after ``wait_s`` seconds (0: one try) raise the last error."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self._call("/health", timeout_s=10.0)
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
