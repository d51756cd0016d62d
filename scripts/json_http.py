"""The JSON-over-HTTP request handler of the reference servers (``reward_server.py``, ``teacher_server.py``): HTTP/1.1
keep-alive, JSON bodies in and out, one line per request on stderr. Standard library only."""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler
from typing import Any


class JSONHandler(BaseHTTPRequestHandler):
    """A request handler whose subclasses answer with :meth:`send_json` and read a POST body with :meth:`read_json`."""

    protocol_version = "HTTP/1.1"

    def send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_json(self) -> Any:
        """The request's JSON body (``ValueError`` / ``UnicodeDecodeError`` when it is not JSON)."""
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")
