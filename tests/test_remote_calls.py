"""``genalign.remote_calls`` against servers that misbehave on purpose (tests/misbehaving_http.py): every request ends
within its deadline, an answer stops at the size cap with bounded memory, deep JSON is an error of its own, credentials
never follow a redirect to another origin, and retries back off within the total deadline."""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler

import pytest

from genalign.remote_calls import DEFAULT_MAX_RESPONSE_BYTES, CallFailed, call_json
from tests.misbehaving_http import (
    MIB,
    RecordingOrigin,
    listening_socket_that_never_accepts,
    misbehave,
    send_json,
    serve,
    timed,
    tls_trickler,
)

DEADLINE_S = 0.5
SLACK_S = 0.4  # thread start-up and a loaded machine; a read per-socket-operation timeout would take forever here


class Server:
    """``/ok`` answers ``{"ok": true}`` (and records the Authorization header); ``/<behaviour>`` misbehaves."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.other = RecordingOrigin()
        self.authorization: list[str | None] = []
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                outer.requests += 1
                behaviour = self.path.strip("/")
                if behaviour != "no_read":
                    self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if behaviour == "ok":
                    outer.authorization.append(self.headers.get("Authorization"))
                    send_json(self, 200, {"ok": True})
                else:
                    misbehave(self, behaviour, stop=outer.stop, elsewhere=outer.other.url)

        self.server, self.url = serve(Handler)

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()
        self.other.close()


@pytest.fixture
def server():
    fake = Server()
    yield fake
    fake.close()


def test_a_good_answer(server):
    assert call_json("POST", server.url + "/ok", {"a": 1}, timeout_s=DEADLINE_S) == {"ok": True}


@pytest.mark.parametrize("behaviour", ["trickle_body", "trickle_headers", "silent", "no_read"])
def test_a_server_that_trickles_or_stalls_fails_at_the_deadline(server, behaviour):
    payload = {"blob": "x" * (16 * MIB)} if behaviour == "no_read" else {"a": 1}  # more than the socket buffers hold
    encoding_s, _ = timed(lambda: json.dumps(payload).encode())  # done before the deadline starts
    elapsed, result = timed(lambda: call_json("POST", f"{server.url}/{behaviour}", payload, timeout_s=DEADLINE_S))
    assert isinstance(result, CallFailed) and result.kind == "timeout" and result.retryable, (elapsed, result)
    assert DEADLINE_S - 0.05 < elapsed < DEADLINE_S + SLACK_S + encoding_s, (behaviour, elapsed, encoding_s)
    assert f"within {DEADLINE_S:g} s" in str(result)


def test_a_server_that_never_accepts_fails_at_the_deadline():
    sock, url = listening_socket_that_never_accepts()
    with sock:
        elapsed, result = timed(lambda: call_json("POST", url + "/score", {"a": 1}, timeout_s=DEADLINE_S))
    assert isinstance(result, CallFailed) and result.kind == "timeout"
    assert elapsed < DEADLINE_S + SLACK_S


def test_a_tls_handshake_that_trickles_fails_at_the_deadline():
    stop = threading.Event()
    sock, url = tls_trickler(stop)
    try:
        elapsed, result = timed(lambda: call_json("POST", url + "/score", {"a": 1}, timeout_s=DEADLINE_S))
    finally:
        stop.set()
        sock.close()
    assert isinstance(result, CallFailed) and result.kind == "timeout", result
    assert elapsed < DEADLINE_S + SLACK_S


def test_a_300_mib_answer_stops_at_the_cap_with_bounded_memory(server):
    tracemalloc.start()
    try:
        elapsed, result = timed(lambda: call_json("POST", server.url + "/huge", {"a": 1}, timeout_s=10))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(result, CallFailed) and result.kind == "too_large" and not result.retryable
    assert f"limit of {DEFAULT_MAX_RESPONSE_BYTES} bytes" in str(result)
    assert peak < 2 * DEFAULT_MAX_RESPONSE_BYTES, peak / MIB  # the cap (16 MiB) and one read, not 300 MiB
    assert elapsed < 5
    # a declared Content-Length over the cap fails before the body is read
    cap = 4 * MIB
    call = lambda: call_json("POST", server.url + "/huge_declared", {}, timeout_s=10, max_response_bytes=cap)  # noqa: E731
    elapsed, result = timed(call)
    assert isinstance(result, CallFailed) and result.kind == "too_large"
    assert f"declares {300 * MIB} bytes, over the limit of {cap} bytes" in str(result)


def test_json_nested_200000_deep_is_a_bad_json_failure_not_a_recursion_error(server):
    _, result = timed(lambda: call_json("POST", server.url + "/deep", {}, timeout_s=5))
    assert isinstance(result, CallFailed) and result.kind == "bad_json" and "nests too deeply" in str(result)


@pytest.mark.parametrize("behaviour", ["redirect_away", "redirect_away_307"])
def test_credentials_never_follow_a_redirect_to_another_origin(server, behaviour):
    headers = {"Authorization": "Bearer secret"}
    _, result = timed(lambda: call_json("POST", f"{server.url}/{behaviour}", {}, timeout_s=5, headers=headers))
    assert isinstance(result, CallFailed) and result.kind == "redirect_refused" and not result.retryable
    assert server.other.url in str(result)
    assert server.other.seen == []  # not followed at all: no request, no Authorization header, reached the other port


def test_a_redirect_within_the_origin(server):
    headers = {"Authorization": "Bearer secret"}
    # a 307 within the origin is followed, with its credentials; a 302 (which would turn a POST into a GET) is not
    assert call_json("POST", server.url + "/redirect_home", {}, timeout_s=5, headers=headers) == {"ok": True}
    assert server.authorization == ["Bearer secret"]
    _, result = timed(lambda: call_json("POST", server.url + "/redirect_302", {}, timeout_s=5))
    assert isinstance(result, CallFailed) and result.kind == "redirect_refused"


def test_retries_back_off_with_jitter_and_count_by_kind(server):
    events: list[str] = []
    elapsed, result = timed(lambda: call_json("POST", server.url + "/http500", {}, timeout_s=1, retries=2,
                                              backoff_s=0.1, record=events.append))  # fmt: skip
    assert isinstance(result, CallFailed) and result.kind == "http_status" and result.status == 500
    assert json.loads(result.body) == {"error": "overloaded"}
    assert events == ["request", "http_status", "retry"] * 2 + ["request", "http_status"]
    assert 0.1 + 0.2 <= elapsed < 1.5 * (0.1 + 0.2) + SLACK_S  # waits of backoff_s * 2**k * [1, 1.5)
    # not retried: a retry would get the same answer
    events.clear()
    call_json("POST", server.url + "/ok", {}, timeout_s=1, retries=2, record=events.append)
    assert events == ["request"]
    for behaviour in ("huge_declared", "redirect_away"):
        events.clear()
        with pytest.raises(CallFailed):
            call_json("POST", f"{server.url}/{behaviour}", {}, timeout_s=1, retries=2, backoff_s=0.01,
                      record=events.append)  # fmt: skip
        assert events.count("request") == 1


def test_total_timeout_bounds_every_attempt_and_wait(server):
    events: list[str] = []
    call = lambda: call_json("POST", server.url + "/trickle_body", {}, timeout_s=0.3, retries=10, backoff_s=0.05,  # noqa: E731
                             total_timeout_s=1.0, record=events.append)  # fmt: skip
    elapsed, result = timed(call)
    assert isinstance(result, CallFailed) and result.kind == "timeout"
    assert elapsed < 1.0 + SLACK_S, elapsed
    assert 2 <= events.count("timeout") <= 4 and events.count("retry") == events.count("timeout") - 1


def test_an_answer_that_parse_rejects_is_malformed(server):
    def parse(answer):
        raise KeyError("rewards")

    with pytest.raises(CallFailed) as caught:
        call_json("POST", server.url + "/ok", {}, timeout_s=1, parse=parse)
    assert caught.value.kind == "malformed"


def test_proxies_come_from_the_environment(server, monkeypatch):
    for name in ("no_proxy", "NO_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", server.other.url)
    # the proxy (the recording server) gets the full address of the real one
    assert call_json("POST", "http://reward-host.invalid:8123/score", {"completions": ["a"]}, timeout_s=5) == {
        "rewards": [1.0]
    }
    assert server.other.seen == [("http://reward-host.invalid:8123/score", None)]
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    assert call_json("POST", server.url + "/ok", {}, timeout_s=5) == {"ok": True}
    assert len(server.other.seen) == 1


def test_concurrent_requests_each_end_on_their_own_deadline(server):
    results: list[tuple[float, object]] = []

    def one() -> None:
        results.append(timed(lambda: call_json("POST", server.url + "/trickle_body", {}, timeout_s=DEADLINE_S)))

    threads = [threading.Thread(target=one) for _ in range(4)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert time.perf_counter() - start < DEADLINE_S + SLACK_S
    assert len(results) == 4 and all(isinstance(r, CallFailed) and r.kind == "timeout" for _, r in results)
