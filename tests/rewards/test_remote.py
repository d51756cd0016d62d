"""``remote_reward`` against a server started by the test (127.0.0.1, a free port, a thread) that answers correctly or
fails on purpose, and the reference server script end to end."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from genalign.remote_calls import FAILURE_KINDS
from genalign.rewards import REWARDS
from genalign.rewards.remote import FAILURE_COUNTERS, RemoteReward, from_json_value, parse_rewards, to_json_value
from genalign.rewards.runner import call_reward
from tests.misbehaving_http import BEHAVIOURS, RecordingOrigin, misbehave
from tests.reliability.conftest import metrics as toy_metrics
from tests.reliability.conftest import toy_config, toy_family  # noqa: F401  (the toy policy family)

REPO = Path(__file__).resolve().parents[2]
PROMPTS = [f"p{i}" for i in range(5)]
COMPLETIONS = ["a", "bb", "ccc", "dddd", "eeeee"]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # a client that gave up (timeout) is expected here
        pass


class FakeRewardServer:
    """Modes by path: ``/ok`` (reward = len(completion) + bonus column), ``/null``, ``/slow``, ``/malformed``,
    ``/wrong_length``, ``/nonnumeric``, ``/drop``, ``/http500``, ``/http400``, ``/flaky`` (500 for the first two
    requests), ``/concurrent`` (waits 0.2 s), ``/<behaviour>`` of tests/misbehaving_http.py, and ``/by_completion``
    (misbehaves as the batch's first completion names, else as ``/ok``). Counts requests per path and the most
    requests in flight."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.other = RecordingOrigin()  # another origin, for redirects
        self.requests: Counter[str] = Counter()
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests[self.path] += 1
                    count = outer.requests[self.path]
                    outer.bodies.append(body)
                    outer.headers.append(dict(self.headers))
                outer.answer(self, self.path, body, count)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def answer(self, handler, path: str, body: dict, count: int) -> None:
        completions = body["completions"]
        behaviour = completions[0] if path == "/by_completion" else path.strip("/")
        if path == "/every_other":  # every second request misbehaves, in turn as each of these
            behaviour = ("ok", "trickle_body", "ok", "huge", "ok", "deep", "ok", "redirect_away")[(count - 1) % 8]
        if behaviour in BEHAVIOURS:
            misbehave(handler, behaviour, stop=self.stop, elsewhere=self.other.url)
            return
        bonus = body["columns"].get("bonus", [0] * len(completions))
        rewards = [len(c) + b if isinstance(c, str) else 1.0 for c, b in zip(completions, bonus)]
        if path == "/slow":
            time.sleep(1.0)
        if path == "/concurrent":  # in flight while it waits, before its answer is written (no race with the next)
            with self.lock:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
            time.sleep(0.2)
            with self.lock:
                self.in_flight -= 1
        if path == "/null":
            rewards = [None if i % 2 else r for i, r in enumerate(rewards)]
        if path == "/drop":
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)
            return
        if path == "/http500" or (path == "/flaky" and count <= 2):
            handler._send(500, b'{"error": "boom"}')
        elif path == "/http400":
            handler._send(400, b'{"error": "bad request"}')
        elif path == "/malformed":
            handler._send(200, b'{"rewards": [1.0, ')
        elif path == "/wrong_length":
            handler._send(200, json.dumps({"rewards": rewards[:-1]}).encode())
        elif path == "/nonnumeric":
            handler._send(200, json.dumps({"rewards": ["high"] * len(rewards)}).encode())
        else:
            handler._send(200, json.dumps({"rewards": rewards}).encode())

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()
        self.other.close()


@pytest.fixture
def server():
    fake = FakeRewardServer()
    yield fake
    fake.close()


def _reward(server, path, **args) -> RemoteReward:
    defaults = {"batch_size": 2, "timeout_s": 5.0, "retries": 2, "backoff_s": 0.01}
    return REWARDS.get("remote_reward")(url=server.url + path, **(defaults | args))


def test_scores_in_batches_in_order(server):
    reward = _reward(server, "/ok", max_concurrency=3)
    assert isinstance(reward, RemoteReward)
    assert reward(PROMPTS, COMPLETIONS, bonus=[10, 20, 30, 40, 50]) == [11.0, 22.0, 33.0, 44.0, 55.0]
    assert server.requests["/ok"] == 3  # ceil(5 / batch_size 2)
    first = next(body for body in server.bodies if body["prompts"][0] == "p0")
    assert first == {"prompts": ["p0", "p1"], "completions": ["a", "bb"], "columns": {"bonus": [10, 20]}}
    metrics = reward.pop_metrics()
    assert metrics["requests"] == 3 and metrics["retries"] == 0 and metrics["failed_samples"] == 0
    assert reward.pop_metrics()["requests"] == 0  # reset by pop
    # only the named columns travel
    _reward(server, "/ok", columns=[])(PROMPTS[:1], COMPLETIONS[:1], bonus=[1])
    assert server.bodies[-1]["columns"] == {}
    with pytest.raises(ValueError, match=r"columns \['gold'\] are not in the batch"):
        _reward(server, "/ok", columns=["gold"])(PROMPTS[:1], COMPLETIONS[:1], bonus=[1])


def test_null_is_not_applicable(server):
    reward = _reward(server, "/null", batch_size=5)
    assert reward(PROMPTS, COMPLETIONS) == [1.0, None, 3.0, None, 5.0]
    assert reward.pop_metrics()["null_rewards"] == 2


@pytest.mark.parametrize(
    ("path", "counter", "retried"),
    [
        ("/malformed", "bad_json_responses", True),  # truncated: not JSON (JSON of the wrong shape: malformed)
        ("/wrong_length", "malformed_responses", True),
        ("/nonnumeric", "malformed_responses", True),
        ("/drop", "connection_errors", True),
        ("/http500", "http_errors", True),
        ("/http400", "http_errors", False),  # a client error cannot succeed on a retry
    ],
)
def test_failures_are_retried_counted_and_never_a_silent_zero(server, path, counter, retried):
    skip = _reward(server, path, on_failure="skip", retries=2)
    assert skip(PROMPTS, COMPLETIONS) == [None] * 5  # not applicable: excluded from group statistics
    attempts = 3 if retried else 1
    assert server.requests[path] == 3 * attempts  # three batches, each tried 1 + retries times
    metrics = skip.pop_metrics()
    assert metrics[counter] == 3 * attempts
    assert metrics["retries"] == 3 * (attempts - 1)
    assert metrics["failed_requests"] == 3 and metrics["failed_samples"] == 5
    # through the trainer's runner: NaN (excluded), never 0
    values, errors = call_reward("remote", skip, PROMPTS[:2], COMPLETIONS[:2], {})
    assert all(math.isnan(v) for v in values) and errors == 0
    # on_failure=raise (the default): a clear error
    strict = _reward(server, path, retries=0)
    with pytest.raises(RuntimeError, match=rf"remote_reward: 1 of 1 requests to {server.url}{path} failed"):
        strict(PROMPTS[:2], COMPLETIONS[:2])
    with pytest.raises(RuntimeError, match="reward 'remote' failed on sample 0"):
        call_reward("remote", strict, PROMPTS[:2], COMPLETIONS[:2], {})


def test_timeout(server):
    reward = _reward(server, "/slow", timeout_s=0.3, retries=1, batch_size=5, on_failure="skip")
    start = time.perf_counter()
    assert reward(PROMPTS, COMPLETIONS) == [None] * 5
    assert time.perf_counter() - start < 1.8  # two attempts of 0.3 s, not the server's 1 s each
    metrics = reward.pop_metrics()
    assert metrics["timeouts"] == 2 and metrics["retries"] == 1 and metrics["failed_samples"] == 5
    assert server.requests["/slow"] == 2


@pytest.mark.parametrize(
    ("behaviour", "counter", "attempts"),
    [
        ("trickle_body", "timeouts", 2),  # one byte every 0.1 s, forever
        ("silent", "timeouts", 2),
        ("huge", "too_large_responses", 1),  # 300 MiB, no Content-Length; too_large is not retried
        ("deep", "bad_json_responses", 2),  # 200,000 '['
        ("redirect_away", "redirects_refused", 1),
    ],
)
def test_misbehaving_servers_end_within_the_deadline_counted_by_kind(server, monkeypatch, behaviour, counter,
                                                                      attempts):  # fmt: skip
    monkeypatch.setenv("GENALIGN_TEST_REWARD_KEY", "secret")
    reward = _reward(server, "/" + behaviour, batch_size=5, timeout_s=0.5, total_timeout_s=0.8, retries=1,
                     on_failure="skip", api_key_env="GENALIGN_TEST_REWARD_KEY")  # fmt: skip
    start = time.perf_counter()
    assert reward(PROMPTS, COMPLETIONS) == [None] * 5
    assert time.perf_counter() - start < 0.8 + 0.4  # each attempt within timeout_s, all within total_timeout_s
    metrics = reward.pop_metrics()
    assert metrics[counter] == attempts and metrics["requests"] == attempts and metrics["retries"] == attempts - 1
    assert metrics["failed_requests"] == 1 and metrics["failed_samples"] == 5
    assert server.other.seen == []  # the credentials never went to the other origin
    assert set(FAILURE_COUNTERS) == set(FAILURE_KINDS)  # every kind of failure has its counter


def test_training_continues_through_a_misbehaving_server(server, monkeypatch):
    """The trainer's RewardSet with a remote reward whose server misbehaves on most requests (one sample per request,
    each sample naming how its request fails) and on_failure: skip: the step ends within one deadline, the failed
    samples are not applicable (NaN), the other reward still scores them, the failures are counted by kind, and the
    next step scores normally."""
    from genalign.config.schema import RewardSpec
    from genalign.trainer.rewards import RewardSet

    monkeypatch.setenv("GENALIGN_TEST_REWARD_KEY", "secret")
    args = {"url": server.url + "/by_completion", "batch_size": 1, "max_concurrency": 8, "timeout_s": 0.5,
            "retries": 0, "on_failure": "skip", "api_key_env": "GENALIGN_TEST_REWARD_KEY"}  # fmt: skip
    rewards = RewardSet([RewardSpec(fn="remote_reward", name="remote", args=args),
                         RewardSpec(fn=lambda prompts, completions, **columns: [0.5] * len(completions),
                                    name="local")])  # fmt: skip
    outputs = ["ok", "trickle_body", "silent", "huge", "deep", "redirect_away", "http500", "okay"]
    rows = [{"prompt": f"p{i}"} for i in range(len(outputs))]
    start = time.perf_counter()
    table, errors = rewards(rows, outputs)
    assert time.perf_counter() - start < 0.5 + 0.4
    assert torch.equal(table[:, 0].isnan(), torch.tensor([False] + [True] * 6 + [False]))
    assert table[[0, 7], 0].tolist() == [2.0, 4.0] and table[:, 1].tolist() == [0.5] * 8 and errors.tolist() == [0, 0]
    assert rewards.table_sum(table)[1].item() == 0.5  # the combined reward of a failed sample: the other reward's
    metrics = rewards.take_metrics()
    expected = {"requests": 8, "failed_requests": 6, "failed_samples": 6, "timeouts": 2, "too_large_responses": 1,
                "bad_json_responses": 1, "redirects_refused": 1, "http_errors": 1}  # fmt: skip
    assert {key: metrics[f"reward/remote/{key}"] for key in expected} == expected
    assert server.other.seen == []
    table, _ = rewards(rows[:2], ["ok", "okay"])  # the next step
    assert table[:, 0].tolist() == [2.0, 4.0]


def test_a_toy_training_run_with_a_misbehaving_remote_reward_runs_to_the_end(server, tmp_path, toy_family):  # noqa: F811
    """A short training run (the trainer tests' toy policy) whose second reward is a remote one that trickles, sends
    300 MiB, deep JSON or a redirect on every second request, with on_failure: skip: every step runs, its reward
    table is NaN where the remote reward failed, the failures are logged by kind."""
    from genalign.config.schema import RewardSpec
    from genalign.trainer import train

    config = toy_config(tmp_path, run={"max_steps": 4, "save_every": 100})
    args = {"url": server.url + "/every_other", "batch_size": 4, "max_concurrency": 4, "timeout_s": 0.5,
            "retries": 0, "on_failure": "skip"}  # fmt: skip
    config.rewards.append(RewardSpec(fn="remote_reward", name="remote", args=args, weight=0.0))
    train(config)
    records = toy_metrics(tmp_path / "run")
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert [r["reward/remote/missing"] for r in records] == [8] * 4  # two of the four requests of each step failed
    total = {key: sum(r.get(f"reward/remote/{key}", 0) for r in records) for key in ("requests", "failed_samples",
             "timeouts", "too_large_responses", "bad_json_responses", "redirects_refused")}  # fmt: skip
    assert total == {"requests": 16, "failed_samples": 32, "timeouts": 2, "too_large_responses": 2,
                     "bad_json_responses": 2, "redirects_refused": 2}  # fmt: skip


def test_retries_recover(server):
    reward = _reward(server, "/flaky", batch_size=5, retries=2)
    assert reward(PROMPTS, COMPLETIONS) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert server.requests["/flaky"] == 3
    metrics = reward.pop_metrics()
    assert metrics["retries"] == 2 and metrics["http_errors"] == 2 and metrics["failed_requests"] == 0


def test_backoff_doubles(server):
    reward = _reward(server, "/http500", batch_size=5, retries=2, backoff_s=0.1, on_failure="skip")
    start = time.perf_counter()
    reward(PROMPTS, COMPLETIONS)
    assert time.perf_counter() - start >= 0.1 + 0.2


def test_concurrency(server):
    reward = _reward(server, "/concurrent", batch_size=1, max_concurrency=4)
    assert reward(PROMPTS[:4], COMPLETIONS[:4]) == [1.0, 2.0, 3.0, 4.0]
    assert server.max_in_flight >= 2  # each request waits 0.2 s on the server: they overlapped
    serial = _reward(server, "/concurrent", batch_size=1, max_concurrency=1)
    server.max_in_flight = 0
    serial(PROMPTS[:2], COMPLETIONS[:2])
    assert server.max_in_flight == 1


def test_unreachable_server_is_a_connection_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    reward = RemoteReward(url=f"http://127.0.0.1:{port}/score", retries=1, backoff_s=0.01, on_failure="skip")
    assert reward(PROMPTS[:1], COMPLETIONS[:1]) == [None]
    assert reward.pop_metrics()["connection_errors"] == 2


def test_images_travel_as_base64_png(server):
    rng = np.random.default_rng(0)
    array = rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)
    video = rng.integers(0, 256, (2, 4, 4, 3), dtype=np.uint8)
    encoded = to_json_value([Image.fromarray(array), array, video, np.float32(0.5), np.arange(3)])
    assert set(encoded[0]) == {"$image"} and encoded[0] == encoded[1]
    assert len(encoded[2]["$video"]) == 2 and encoded[3:] == [0.5, [0, 1, 2]]
    decoded = from_json_value(json.loads(json.dumps(encoded)))
    assert np.array_equal(np.asarray(decoded[0]), array) and np.array_equal(decoded[2], video)
    reward = _reward(server, "/ok")
    assert reward(["p"], [Image.fromarray(array)]) == [1.0]
    assert set(server.bodies[-1]["completions"][0]) == {"$image"}
    with pytest.raises(TypeError, match="encode_images is false"):
        _reward(server, "/ok", encode_images=False)(["p"], [array])
    with pytest.raises(TypeError, match="column 'meta' is a object"):
        reward(["p"], ["a"], meta=[object()])


def test_parse_rewards():
    assert parse_rewards({"rewards": [1, None, 2.5]}, 3) == [1.0, None, 2.5]
    for answer, match in (
        ([1.0], "expected"),
        ({"reward": [1.0]}, "expected"),
        ({"rewards": [1.0]}, "1 rewards for a batch of 2"),
        ({"rewards": [1.0, True]}, "reward 1 is True"),
        ({"rewards": [1.0, float("nan")]}, "reward 1 is nan"),
    ):
        with pytest.raises(ValueError, match=match):
            parse_rewards(answer, 2)


def test_api_key_header(server, monkeypatch):
    monkeypatch.setenv("GENALIGN_TEST_REWARD_KEY", "secret")
    _reward(server, "/ok", api_key_env="GENALIGN_TEST_REWARD_KEY")(["p"], ["a"])
    assert server.headers[-1]["Authorization"] == "Bearer secret"
    with pytest.raises(ValueError, match="api_key_env='GENALIGN_TEST_NO_SUCH_KEY' names an environment variable"):
        _reward(server, "/ok", api_key_env="GENALIGN_TEST_NO_SUCH_KEY")


def test_constructor_errors_name_the_field():
    for bad, match in (
        ({"url": "localhost:8000"}, "url='localhost:8000' is not valid"),
        ({"url": "http://reward-host:port/score"}, "url='http://reward-host:port/score' is not valid"),
        ({"total_timeout_s": 0}, "total_timeout_s=0 is not valid"),
        ({"max_response_mb": -1}, "max_response_mb=-1 is not valid"),
        ({"batch_size": 0}, "batch_size=0 is not valid; use an integer >= 1"),
        ({"max_concurrency": 1.5}, "max_concurrency=1.5"),
        ({"timeout_s": 0}, "timeout_s=0"),
        ({"retries": -1}, "retries=-1"),
        ({"on_failure": "zero"}, "on_failure='zero' is not valid; use one of 'raise', 'skip'"),
        ({"columns": "answer"}, "columns='answer' must be a list"),
    ):
        with pytest.raises(ValueError, match=match):
            RemoteReward(**({"url": "http://127.0.0.1:1/score"} | bad))


def test_reference_server_end_to_end():
    env = os.environ | {"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(REPO / "scripts" / "reward_server.py"), "--reward", "exact_match", "--args",
               '{"lowercase": true}', "--port", "0"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        line = process.stdout.readline()  # "serving reward 'exact_match' on http://127.0.0.1:<port>"
        assert "serving reward 'exact_match' on http://" in line, line
        base = line.rsplit(" ", 1)[1].strip()
        reward = RemoteReward(url=base + "/score", batch_size=2, max_concurrency=2, retries=0)
        answers = ["A", "b", "c", None, "E"]
        values = reward(PROMPTS, ["a", "B", "x", "d", "e"], answer=answers)
        assert values == [1.0, 1.0, 0.0, None, 1.0]
        # a request the reward cannot score (no 'answer' column) is a 500 from the server: an error, not a zero
        with pytest.raises(RuntimeError, match=r"HTTP 500.*answer"):
            reward(PROMPTS[:1], COMPLETIONS[:1])
        with urllib.request.urlopen(base + "/health", timeout=5) as response:
            assert json.loads(response.read()) == {"status": "ok", "reward": "exact_match"}
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_docs_examples_pass_config_validation():
    """Every reward in the YAML examples of docs/reward_models.md names only args the reward takes, with valid
    choices; and a bad choice is caught by the same check."""
    import re

    import yaml

    from genalign.config.checks import check_reward_args
    from genalign.config.core import ConfigError
    from genalign.config.schema import RewardSpec

    text = (REPO / "docs" / "reward_models.md").read_text()
    specs = [s for block in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL) for s in yaml.safe_load(block)["rewards"]]
    assert {s["fn"] for s in specs} == {"reward_model", "llm_judge", "remote_reward"}
    for i, spec in enumerate(specs):
        check_reward_args(i, RewardSpec(**spec))
    for fn, args in (("remote_reward", {"on_failure": "zero"}), ("llm_judge", {"verdit": "number"}),
                     ("reward_model", {"dtype": "fp8"})):  # fmt: skip
        with pytest.raises(ConfigError):
            check_reward_args(0, RewardSpec(fn=fn, args=args))
