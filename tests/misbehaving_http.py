"""HTTP servers that misbehave on purpose, on 127.0.0.1 (ephemeral ports, threads), for the deadline, size, JSON and
redirect tests of :mod:`genalign.remote_calls` and of the HTTP rewards built on it.

:func:`misbehave` answers one request the way a named behaviour says (:data:`BEHAVIOURS`); a behaviour that never ends
(trickling, silence) stops when the client goes away or the server closes. Large bodies are streamed from one reused
1 MiB block, never built in memory.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MIB = 2**20
BEHAVIOURS = {
    "trickle_body": "200 and headers at once, then one byte of body every 0.1 s, forever",
    "trickle_headers": "the status line, then one byte of a header line every 0.1 s, forever",
    "silent": "reads the request and never answers",
    "no_read": "never reads the request (the client's send blocks once the socket buffers fill) nor answers",
    "huge": "300 MiB of body without Content-Length (ends when the connection closes), streamed lazily",
    "huge_declared": "Content-Length: 300 MiB, then the body, streamed lazily",
    "deep": "200,000 '[' (JSON nested 200,000 deep)",
    "redirect_away": "302 to the same path on another port (another origin; urllib followed it as a GET, with the "
    "Authorization header)",
    "redirect_away_307": "307 to the same path on another port",
    "redirect_home": "307 to /ok on the same origin",
    "redirect_302": "302 to /ok on the same origin",
    "http500": "500 with a JSON error",
}
_BLOCK = b" " * MIB


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # a client that gave up mid-answer is what the tests provoke
        pass


def serve(handler_class: type[BaseHTTPRequestHandler]) -> tuple[QuietServer, str]:
    """``handler_class`` served on 127.0.0.1 (a free port) in a daemon thread; returns the server and its URL."""
    server = QuietServer(("127.0.0.1", 0), handler_class)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def send_json(handler: BaseHTTPRequestHandler, status: int, answer: object) -> None:
    data = json.dumps(answer).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def misbehave(handler: BaseHTTPRequestHandler, behaviour: str, *, stop: threading.Event, elsewhere: str) -> None:
    """Answer the request ``handler`` holds as :data:`BEHAVIOURS` [``behaviour``] says; ``elsewhere`` is the base URL
    of another origin (``redirect_away``); ``stop`` ends the behaviours that never end."""
    assert behaviour in BEHAVIOURS, behaviour
    try:
        if behaviour in ("trickle_body", "trickle_headers"):
            handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
            handler.wfile.write(b"X-Slow: " if behaviour == "trickle_headers" else b"Content-Type: text/plain\r\n\r\n")
            while not stop.wait(0.1):
                handler.wfile.write(b"7")
        elif behaviour in ("silent", "no_read"):
            stop.wait(30)
        elif behaviour in ("huge", "huge_declared"):
            handler.send_response(200)
            if behaviour == "huge_declared":
                handler.send_header("Content-Length", str(300 * MIB))
            handler.end_headers()
            for _ in range(300):
                handler.wfile.write(_BLOCK)
        elif behaviour == "deep":
            data = b"[" * 200_000
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        elif behaviour.startswith("redirect"):
            target = elsewhere + handler.path if behaviour.startswith("redirect_away") else "/ok"
            handler.send_response(302 if behaviour in ("redirect_away", "redirect_302") else 307)
            handler.send_header("Location", target)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
        else:
            send_json(handler, 500, {"error": "overloaded"})
    except OSError:  # the client gave up: what the deadline and the cap are for
        handler.close_connection = True


class RecordingOrigin:
    """Another origin: answers 200 ``{"rewards": [...]}`` of the right length (to a GET too, which is what a POST
    redirected by 302 becomes in urllib) and records every request's path and ``Authorization`` header (None when
    absent)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                outer.seen.append((self.path, self.headers.get("Authorization")))
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                send_json(self, 200, {"rewards": [1.0] * len(body.get("completions", []))})

            do_GET = do_POST

        self.server, self.url = serve(Handler)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def listening_socket_that_never_accepts() -> tuple[socket.socket, str]:
    """A socket that listens (connections complete in the kernel's backlog) but is never accepted: the request goes
    into the socket buffer and no byte ever comes back."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


def tls_trickler(stop: threading.Event) -> tuple[socket.socket, str]:
    """An ``https://`` address whose server accepts, then sends the start of a 16 KiB TLS handshake record one byte
    every 0.1 s: a handshake that never ends."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)

    def run() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=_trickle_tls, args=(conn, stop), daemon=True).start()

    threading.Thread(target=run, daemon=True).start()
    return sock, f"https://127.0.0.1:{sock.getsockname()[1]}"


def _trickle_tls(conn: socket.socket, stop: threading.Event) -> None:
    with conn:
        try:
            conn.sendall(b"\x16\x03\x03\x40\x00")  # handshake record, TLS 1.2, 16384 bytes follow
            while not stop.wait(0.1):
                conn.sendall(b"\x02")
        except OSError:
            pass


def timed(call) -> tuple[float, object]:
    """``(seconds, result or exception)`` of ``call()``."""
    start = time.perf_counter()
    try:
        result = call()
    except Exception as error:  # the tests look at which
        result = error
    return time.perf_counter() - start, result
