"""The remote teacher: the answer is checked entry by entry, a server that times out, fails or answers malformed data
leaves its samples unscored and counted (never stops anything), and the reference server
(``scripts/teacher_server.py``) gives the log-probs a local teacher model gives."""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.base import Rollout
from genalign.teachers.config import RemoteTeacherOptions, TeacherConfig
from genalign.teachers.remote import RemoteTeacher, parse_logprobs
from tests.misbehaving_http import send_json, serve

ROOT = Path(__file__).resolve().parents[2]
WANTED = frozenset({"teacher_scored", "teacher_action_logp"})


def test_parse_logprobs_checks_every_entry():
    good = {"logprobs": [[-0.5, -1.0], [-2.0]]}
    assert parse_logprobs(good, [2, 1]) == [[-0.5, -1.0], [-2.0]]
    # an entry of the wrong length, above 0, not finite or not a number: that sample alone is malformed
    bad = {"logprobs": [[-0.5], [0.5], [float("nan")], [True], ["x"], [0.0]]}
    assert parse_logprobs(bad, [2, 1, 1, 1, 1, 1]) == [None, None, None, None, None, [0.0]]
    for answer, lengths in [({"logprobs": [[-1.0]]}, [1, 1]), ({"rewards": []}, []), ([[-1.0]], [1])]:
        with pytest.raises(ValueError):  # the whole batch is malformed
            parse_logprobs(answer, lengths)


class TeacherServer:
    """``/ok``: log-prob ``-(k + 1)/10`` for token ``k``; ``/one_bad``: the second entry of a batch is too short; ``/slow``:
    answers after 2 s (the second batch too); ``/fail``: HTTP 500; ``/flaky``: every other request times out."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                values = [[-(k + 1) / 10 for k in range(len(ids))] for ids in body["completion_token_ids"]]
                if self.path == "/slow" or (self.path == "/flaky" and len(outer.requests) % 2 == 0):
                    outer.stop.wait(2.0)
                if self.path == "/fail":
                    send_json(self, 500, {"error": "boom"})
                    return
                if self.path == "/one_bad" and len(values) > 1:
                    values[1] = values[1][:-1]
                send_json(self, 200, {"logprobs": values})

            def log_message(self, *args) -> None:
                pass

        self.server, self.url = serve(Handler)

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server():
    fake = TeacherServer()
    yield fake
    fake.close()


def rollout() -> Rollout:
    """Three samples of 3, 2 and 1 actions (token ids 5, 6, ...)."""
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    ids = torch.tensor([[5, 6, 7], [8, 9, 0], [10, 0, 0]])
    return Rollout(
        rows=[{"prompt": f"p{i}"} for i in range(3)], outputs=["a", "b", "c"], group_ids=torch.zeros(3, dtype=torch.long),
        old_logp=torch.zeros(3, 3), action_mask=mask, structure={"action_ids": ids},
    )  # fmt: skip


def teacher(server: TeacherServer, path: str, batch_size: int = 2, **options) -> RemoteTeacher:
    remote = RemoteTeacherOptions(url=server.url + path, timeout_s=0.5, retries=0, backoff_s=0.01, **options)
    return RemoteTeacher(TeacherConfig(source="remote", remote=remote), host=None, batch_size=batch_size)


def test_the_server_scores_the_sampled_token_ids_in_batches(server):
    remote = teacher(server, "/ok")
    values = remote.judge(rollout(), WANTED)
    expected = torch.tensor([[-0.1, -0.2, -0.3], [-0.1, -0.2, 0.0], [-0.1, 0.0, 0.0]])
    torch.testing.assert_close(values["teacher_action_logp"], expected)
    assert values["teacher_scored"].tolist() == [True, True, True]
    assert server.requests[0] == {"prompts": ["p0", "p1"], "completions": ["a", "b"],
                                  "completion_token_ids": [[5, 6, 7], [8, 9]]}  # fmt: skip
    assert len(server.requests) == 2
    metrics = remote.take_metrics()
    assert metrics["teacher/requests"] == 2 and metrics["teacher/failed_samples"] == 0


@pytest.mark.parametrize(
    ("path", "scored", "counter"),
    [
        ("/one_bad", [True, False, True], "teacher/malformed_samples"),  # only the malformed entry's sample
        ("/slow", [False, False, False], "teacher/timeouts"),
        ("/fail", [False, False, False], "teacher/http_errors"),
    ],
)
def test_timeouts_failures_and_malformed_answers_skip_samples_and_are_counted(server, path, scored, counter):
    remote = teacher(server, path)
    values = remote.judge(rollout(), WANTED)
    assert values["teacher_scored"].tolist() == scored
    unscored = ~values["teacher_scored"]
    assert not values["teacher_action_logp"][unscored].any()  # no teacher term for a skipped sample
    metrics = remote.take_metrics()
    assert metrics[counter] >= 1
    assert metrics["teacher/failed_samples"] + metrics["teacher/malformed_samples"] == sum(not s for s in scored)


def test_the_reference_server_gives_the_log_probs_of_the_local_teacher_model(tmp_path):
    from genalign.policies.base import RolloutRequest
    from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
    from genalign.policies.lm.tiny import build_tiny_causal_lm
    from genalign.teachers.build import build_teacher

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import teacher_server
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    student = build_tiny_causal_lm(tmp_path / "student", vocab_size=96, seed=0)
    model = build_tiny_causal_lm(tmp_path / "teacher", architecture="llama", vocab_size=96, seed=1)
    policy = build_policy(CausalLMPolicyConfig(model=str(student), max_new_tokens=4, temperature=0.7))
    torch.manual_seed(0)
    sampled = policy.rollout([{"prompt": "1 + 2 ="}, {"prompt": "3 ="}], 2,
                             request=RolloutRequest(structure=frozenset({"action_ids"})))  # fmt: skip
    local = build_teacher(TeacherConfig(source="model", model=str(model)), policy, batch_size=4)
    http = teacher_server.make_server(teacher_server.Scorer(str(model), temperature=0.7, use_chat_template=False),
                                      str(model), port=0)  # fmt: skip
    threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        options = RemoteTeacherOptions(url=f"http://127.0.0.1:{http.server_address[1]}/", timeout_s=30.0)
        remote = RemoteTeacher(TeacherConfig(source="remote", remote=options), policy.teacher_host(), batch_size=3)
        over_http = remote.judge(sampled, WANTED)
    finally:
        http.shutdown()
        http.server_close()
    assert over_http["teacher_scored"].all()
    in_process = local.judge(sampled, WANTED)["teacher_action_logp"]
    torch.testing.assert_close(over_http["teacher_action_logp"], in_process, atol=1e-5, rtol=0)
