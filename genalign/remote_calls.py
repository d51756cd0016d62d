"""HTTP + JSON calls that end on time: one deadline per request, a cap on the answer's size, JSON that cannot recurse
without bound, credentials that never leave their origin, and bounded retries. Standard library only, and no other
genalign module, so that the remote rewards (:mod:`genalign.rewards`) and the vLLM server client
(:mod:`genalign.policies.lm.engines.vllm`) both use it without an import cycle.

**Why http.client.** ``urllib`` (what genalign used before) and ``httpx`` both bound each socket operation, not the
request: a server that sends one byte every 0.5 s never trips a 1 s timeout, and a body is read whole. httpx
streaming would let us count bytes but still needs our own clock around every read, and is a new dependency. With
``http.client`` a socket whose every read and write is given the time left before the deadline as its timeout (and
fails when none is left) bounds everything http.client reads (status line, header lines, chunk sizes, the body) in a
few lines.

**One attempt** has one deadline for connect, send and receive. The TCP connect gets the time
left as its timeout; the TLS handshake and a proxy's CONNECT, which http.client runs inside ``connect()``, are cut by a
watchdog timer that shuts the socket down at the deadline. The body is read one socket read at a time and abandoned
once it passes ``max_response_bytes`` (at once when ``Content-Length`` says so). JSON nested deeper than the
interpreter can recurse is a ``bad_json`` failure, never a RecursionError. Redirects: only 307 and 308 to the same
scheme, host and port are followed (method, body and headers kept, within the same deadline, at most 5); any other
redirect is refused, so the ``Authorization`` header never reaches another origin. Proxies come from the environment
(``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``) as with urllib. Not under the deadline: resolving a host name
(``getaddrinfo`` has no timeout; the system resolver's own apply), encoding the payload and decoding the answer.

**Retries** (:func:`call_json`): ``timeout_s`` bounds each attempt, ``total_timeout_s`` (optional) all attempts and the
waits between them. Retry ``k`` (0-based) waits ``backoff_s * 2**k`` times a random factor in ``[1, 1.5)``, so that
clients that failed together do not retry together; a wait that would pass the total deadline is not taken (the call
fails with the last failure). Not retried, since a retry gets the same answer: HTTP 4xx other than 408/425/429,
``too_large`` and ``redirect_refused``.

**Failure kinds** (:class:`CallFailed`.kind): ``timeout`` (the deadline passed), ``connection`` (refused, reset,
dropped, TLS or invalid HTTP), ``http_status`` (not 2xx), ``redirect_refused``, ``too_large``, ``bad_json`` (not JSON,
not UTF-8, or nested too deep) and ``malformed`` (JSON that the caller's ``parse`` rejects).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import io
import json
import random
import socket
import threading
import time
import typing
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar

T = TypeVar("T")
FailureKind = Literal["timeout", "connection", "http_status", "redirect_refused", "too_large", "bad_json", "malformed"]
FAILURE_KINDS: tuple[str, ...] = typing.get_args(FailureKind)
#: Default cap on an answer's body (rewards and judges answer in kilobytes).
DEFAULT_MAX_RESPONSE_BYTES = 16 * 2**20
_RETRYABLE_4XX = (408, 425, 429)
_FOLLOWED_REDIRECTS = (307, 308)
_MAX_REDIRECTS = 5
_CHUNK = 64 * 1024
_ERROR_BODY_BYTES = 64 * 1024  # of a non-2xx answer, kept for the message


class CallFailed(Exception):
    """An HTTP call that gave no usable answer: ``kind`` says why (module docstring), ``retryable`` whether another
    attempt may succeed, ``status`` and ``body`` (at most 64 KiB) are the answer's for ``http_status``."""

    def __init__(self, kind: FailureKind, message: str, *, retryable: bool = True, status: int | None = None,
                 body: bytes = b"") -> None:  # fmt: skip
        assert kind in FAILURE_KINDS, kind
        super().__init__(message)
        self.kind, self.retryable, self.status, self.body = kind, retryable, status, body


# ----------------------------------------------------------------------------------------------------------------------
# a socket bounded by the deadline
# ----------------------------------------------------------------------------------------------------------------------


def _time_left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the deadline passed")
    return left


class _DeadlineReader(io.RawIOBase):
    """The socket's reads (through its own raw file, which keeps the socket open while http.client reads the body of
    an answer that closes the connection), each with the time left before ``deadline`` as its timeout."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock, self._raw, self._deadline = sock, sock.makefile("rb", buffering=0), deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        self._sock.settimeout(_time_left(self._deadline))
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _DeadlineSocket:
    """What http.client uses of a socket (``sendall``, ``makefile``, ``close``), every read and write bounded by the
    deadline; a server that trickles, or reads slowly, fails the request when the deadline passes."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock, self._deadline = sock, deadline

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:  # send() by send(): SSLSocket.sendall bounds each send, not the total
            self._sock.settimeout(_time_left(self._deadline))
            view = view[self._sock.send(view[:_CHUNK]) :]

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        assert mode == "rb", mode
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline), _CHUNK)

    def close(self) -> None:
        self._sock.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


# ----------------------------------------------------------------------------------------------------------------------
# one attempt
# ----------------------------------------------------------------------------------------------------------------------


def origin(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of an ``http://`` or ``https://`` address; ValueError for anything else."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http:// or https:// address")
    return scheme, parts.hostname.lower(), parts.port or (443 if scheme == "https" else 80)


def _proxy_for(scheme: str, host: str) -> tuple[str, int, dict[str, str]] | None:
    """``(host, port, headers)`` of the environment's proxy for ``scheme://host``, as urllib chooses it, or None."""
    proxy = urllib.request.getproxies().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    parts = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
    headers = {}
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username) + ":" + urllib.parse.unquote(parts.password or "")
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(user.encode()).decode("ascii")
    return parts.hostname or "", parts.port or 80, headers


def _connect(url: str, deadline: float) -> tuple[http.client.HTTPConnection, str, dict[str, str]]:
    """An open connection for ``url`` whose socket is bounded by ``deadline``, the request target to send and the
    proxy's headers."""
    scheme, host, port = origin(url)
    parts = urllib.parse.urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    proxy = _proxy_for(scheme, host)
    address = (proxy[0], proxy[1]) if proxy else (host, port)
    kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    connection = kind(*address, timeout=_time_left(deadline))
    headers: dict[str, str] = {}
    if proxy and scheme == "https":
        connection.set_tunnel(host, port, headers=proxy[2])
    elif proxy:
        target, headers = f"http://{parts.netloc.rpartition('@')[2]}{target}", proxy[2]  # the proxy wants the URL
    if scheme == "https" or proxy:  # TLS handshake and CONNECT run inside connect(): a watchdog cuts them
        fired = threading.Event()

        def cut() -> None:
            fired.set()
            sock = connection.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        watchdog = threading.Timer(_time_left(deadline), cut)
        watchdog.daemon = True
        watchdog.start()
        try:
            connection.connect()
        except (OSError, http.client.HTTPException):
            if fired.is_set():
                raise TimeoutError("the deadline passed while connecting") from None
            raise
        finally:
            watchdog.cancel()
    else:
        connection.connect()
    connection.sock = _DeadlineSocket(connection.sock, deadline)
    return connection, target, headers


def _same_origin(url: str, home: tuple[str, str, int]) -> bool:
    try:
        return origin(url) == home
    except ValueError:  # not an http(s) address
        return False


class _Progress:
    """Where an attempt is, for the message of a timeout."""

    def __init__(self) -> None:
        self.phase, self.received = "connecting", 0

    def __str__(self) -> str:
        return f"{self.phase}, {self.received} bytes of the answer received" if self.received else self.phase


def _read_body(response: http.client.HTTPResponse, limit: int, progress: _Progress, *, strict: bool) -> bytes:
    """The body, read one socket read at a time; past ``limit`` bytes: ``too_large`` (``strict``) or cut."""
    declared = response.getheader("Content-Length")
    if strict and declared is not None and declared.isdigit() and int(declared) > limit:
        raise CallFailed("too_large", f"the answer declares {int(declared)} bytes, over the limit of {limit} bytes "
                         "(max_response_mb)", retryable=False)  # fmt: skip
    body = bytearray()
    progress.phase = "reading the answer"
    while chunk := response.read1(_CHUNK):
        if len(body) + len(chunk) > limit:
            if not strict:
                return bytes(body + chunk[: limit - len(body)])
            raise CallFailed("too_large", f"the answer passed the limit of {limit} bytes (max_response_mb); stopped "
                             f"reading after {len(body) + len(chunk)} bytes", retryable=False)  # fmt: skip
        body += chunk
        progress.received = len(body)
    if response.length:  # Content-Length promised more than came
        raise http.client.IncompleteRead(bytes(body), response.length)
    return bytes(body)


def decode_json(body: bytes) -> Any:
    """``body`` as JSON; :class:`CallFailed` ``bad_json`` when it is not JSON, not UTF-8 or nested too deep."""
    try:
        return json.loads(body)
    except RecursionError:
        raise CallFailed("bad_json", f"the answer's JSON nests too deeply to parse ({len(body)} bytes, starting "
                         f"{body[:40]!r})") from None  # fmt: skip
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError, an integer of too many digits
        raise CallFailed("bad_json", f"the answer is not JSON ({error}): {body[:200]!r}") from None


def _exchange(method: str, url: str, data: bytes | None, headers: Mapping[str, str], deadline: float,
              max_response_bytes: int, progress: _Progress) -> tuple[int, str, str | None, bytes]:  # fmt: skip
    """``(status, reason, location, body)`` of one request; the body is read only for a non-redirect."""
    connection, target, proxy_headers = _connect(url, deadline)
    try:
        progress.phase = "sending the request"
        connection.request(method, target, body=data, headers={**headers, **proxy_headers})
        progress.phase = "waiting for the answer"
        response = connection.getresponse()
        status, location = response.status, response.getheader("Location")
        if 300 <= status < 400 and location is not None:
            return status, response.reason, location, b""
        success = 200 <= status < 300
        limit = max_response_bytes if success else _ERROR_BODY_BYTES
        return status, response.reason, None, _read_body(response, limit, progress, strict=success)
    finally:
        connection.close()


def _attempt(method: str, url: str, data: bytes | None, headers: Mapping[str, str], deadline: float,
             max_response_bytes: int) -> Any:  # fmt: skip
    """The decoded JSON answer of one attempt, which ends by ``deadline`` (module docstring); raises
    :class:`CallFailed`."""
    start, home, where, progress = time.monotonic(), origin(url), url, _Progress()
    all_headers = {"Content-Type": "application/json", "Accept": "application/json", **headers}
    try:
        for _ in range(_MAX_REDIRECTS + 1):
            status, reason, location, body = _exchange(method, where, data, all_headers, deadline,
                                                       max_response_bytes, progress)  # fmt: skip
            if location is None:
                break
            target = urllib.parse.urljoin(where, location)
            if status not in _FOLLOWED_REDIRECTS or not _same_origin(target, home):
                raise CallFailed("redirect_refused", f"{where} answered {status} {reason}, a redirect to {target}; "
                                 "only 307/308 within the same scheme, host and port are followed (credentials stay "
                                 "with their origin): set the address to the final one", retryable=False)  # fmt: skip
            where = target
        else:
            raise CallFailed("redirect_refused", f"{url}: more than {_MAX_REDIRECTS} redirects", retryable=False)
    except (OSError, http.client.HTTPException) as error:  # TimeoutError is an OSError
        if isinstance(error, TimeoutError) or time.monotonic() >= deadline:
            raise CallFailed("timeout", f"no complete answer from {url} within {deadline - start:.3g} s "
                             f"(connect, send and receive; stopped while {progress})") from None  # fmt: skip
        raise CallFailed("connection", f"connection to {where} failed while {progress}: {type(error).__name__}: "
                         f"{error}") from None  # fmt: skip
    if not 200 <= status < 300:
        retryable = status >= 500 or status in _RETRYABLE_4XX
        detail = body[:300].decode(errors="replace")
        raise CallFailed("http_status", f"HTTP {status} {reason}: {detail}", retryable=retryable, status=status,
                         body=body)  # fmt: skip
    return decode_json(body)


# ----------------------------------------------------------------------------------------------------------------------
# retries
# ----------------------------------------------------------------------------------------------------------------------


def call_json(
    method: Literal["GET", "POST"],
    url: str,
    payload: Any = None,
    *,
    timeout_s: float,
    retries: int = 0,
    backoff_s: float = 1.0,
    total_timeout_s: float | None = None,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    headers: Mapping[str, str] | None = None,
    parse: Callable[[Any], T] | None = None,
    record: Callable[[str], None] | None = None,
) -> T | Any:
    """``parse(answer)`` (or the answer) of a JSON call to ``url``, retried on failure (module docstring).

    Args:
        timeout_s: deadline of one attempt: connect, send and receive.
        retries: further attempts after a retryable failure.
        backoff_s: base of the wait before retry ``k``: ``backoff_s * 2**k * U[1, 1.5)``.
        total_timeout_s: deadline of the whole call, attempts and waits; None: ``(retries + 1)`` attempts and their
            waits at most.
        max_response_bytes: cap on the answer's body.
        parse: checks and converts the answer; raising ValueError, TypeError, KeyError or IndexError marks it
            ``malformed``.
        record: called with ``"request"`` per attempt, ``"retry"`` per retry and the kind of each failure.

    Raises:
        CallFailed: the last failure, when every attempt failed (or one could not succeed on a retry).
    """
    record = record or (lambda event: None)
    data = None if method == "GET" else json.dumps(payload).encode()
    end = time.monotonic() + total_timeout_s if total_timeout_s is not None else float("inf")
    attempt = 0
    while True:
        record("request")
        try:
            deadline = min(time.monotonic() + timeout_s, end)
            answer = _attempt(method, url, data, headers or {}, deadline, max_response_bytes)
            if parse is None:
                return answer
            try:
                return parse(answer)
            except (ValueError, TypeError, KeyError, IndexError, RecursionError) as error:
                raise CallFailed("malformed", f"malformed answer: {error}") from None
        except CallFailed as failure:
            record(failure.kind)
            wait = backoff_s * 2**attempt * (1.0 + 0.5 * random.random())
            if not failure.retryable or attempt >= retries or time.monotonic() + wait >= end:
                raise
        record("retry")
        time.sleep(wait)
        attempt += 1
