"""Reference server for the ``remote_reward`` protocol: serves any registered genalign reward over HTTP.

    python scripts/reward_server.py --reward exact_match --args '{"lowercase": true}' --host 0.0.0.0 --port 8000

``POST`` (any path, e.g. ``/score``) ``{"prompts": [...], "completions": [...], "columns": {name: [...]}}`` answers
``200 {"rewards": [float | null, ...]}``, one value per completion (null: not applicable). Images sent as
``{"$image": "<base64 PNG>"}`` and videos as ``{"$video": [...]}`` are decoded to RGB PIL images and ``[F, H, W, 3]``
uint8 arrays before the reward sees them. A malformed request answers ``400 {"error": ...}``, a reward that fails
``500 {"error": ...}`` (the client retries 5xx answers). ``GET /health`` answers ``{"status": "ok", "reward": name}``
and ``GET /metrics`` the reward's ``pop_metrics()`` counters since the previous ``/metrics``.

Requests are served by threads, but the reward is called by one at a time (reward objects are not assumed
thread-safe). Once listening, the server prints ``serving reward '<name>' on http://<host>:<port>`` (``--port 0``
picks a free port; read it from that line). There is no authentication and no TLS: keep it on a trusted network.
"""

from __future__ import annotations

import argparse
import json
import math
import threading
from http.server import ThreadingHTTPServer
from typing import Any

from json_http import JSONHandler


def check_request(body: Any) -> tuple[list[Any], list[Any], dict[str, list[Any]]]:
    """``(prompts, completions, columns)`` of a request body; ValueError naming what is wrong."""
    if not isinstance(body, dict):
        raise ValueError('the request must be a JSON object {"prompts": [...], "completions": [...], "columns": {...}}')
    prompts, completions, columns = body.get("prompts"), body.get("completions"), body.get("columns", {})
    if not isinstance(prompts, list) or not isinstance(completions, list):
        raise ValueError("'prompts' and 'completions' must be lists")
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions")
    if not isinstance(columns, dict):
        raise ValueError("'columns' must be an object of lists")
    for name, values in columns.items():
        if not isinstance(values, list) or len(values) != len(completions):
            raise ValueError(f"column {name!r} must be a list of {len(completions)} values")
    return prompts, completions, columns


def make_server(reward: str, args: dict[str, Any], host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """A server (not yet serving: call ``serve_forever``) for the registered reward ``reward`` built with ``args``."""
    from genalign.rewards import REWARDS
    from genalign.rewards.remote import from_json_value
    from genalign.rewards.runner import call_reward

    fn = REWARDS.get(reward)(**args)
    lock = threading.Lock()

    class Handler(JSONHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                self.send_json(200, {"status": "ok", "reward": reward})
            elif self.path == "/metrics":
                pop = getattr(fn, "pop_metrics", None)
                with lock:
                    self.send_json(200, pop() if callable(pop) else {})
            else:
                self.send_json(404, {"error": "GET /health or /metrics; POST a batch to score it"})

        def do_POST(self) -> None:
            try:
                prompts, completions, columns = check_request(self.read_json())
                completions, columns = from_json_value(completions), from_json_value(columns)
            except (ValueError, UnicodeDecodeError) as error:
                self.send_json(400, {"error": f"bad request: {error}"})
                return
            try:
                with lock:
                    values, _ = call_reward(reward, fn, prompts, completions, columns, on_error="raise")
            except Exception as error:
                self.send_json(500, {"error": f"{type(error).__name__}: {error}"})
                return
            self.send_json(200, {"rewards": [None if math.isnan(v) else v for v in values]})

    return ThreadingHTTPServer((host, port), Handler)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reward", required=True, help="registered reward name, e.g. exact_match")
    parser.add_argument("--args", default="{}", help="the reward's keyword arguments as a JSON object")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=8000, help="port (0: a free one, printed at start)")
    options = parser.parse_args(argv)
    args = json.loads(options.args)
    if not isinstance(args, dict):
        parser.error(f"--args must be a JSON object, got {options.args!r}")
    server = make_server(options.reward, args, options.host, options.port)
    host, port = server.server_address[:2]
    print(f"serving reward {options.reward!r} on http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
