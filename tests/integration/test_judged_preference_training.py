"""Judged preference rewards through the trainer on the LM demo (``builtin:arith-lm``, tiny sizes, in this process):
group DPO on pairs ranked by ``rubric_judge`` (rDPO [285]: each row's checklist, one question per criterion) and by
the LLM form of ``comparative_judge`` (CRPO [163], CPO [186]: one request per group), both against a judge endpoint
imitated by a server in the test."""

from __future__ import annotations

import json
import math
import os
import re
from http.server import BaseHTTPRequestHandler

import pytest

from genalign.trainer import train
from tests.integration.test_method_catalogue import demo_config
from tests.misbehaving_http import send_json, serve

pytestmark = pytest.mark.heavy(cpu_s=10)

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class _Judge:
    """Rubric questions: yes when the criterion (a digit) appears in the response. Group comparisons: each response's
    ``correctness`` is its count of the digit ``1``. Arbitrary but deterministic rules that an untrained model's
    answers satisfy unevenly, so the rewards differ inside groups."""

    def __init__(self) -> None:
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["messages"][-1]["content"]
                outer.requests += 1
                if message.startswith("Does the response satisfy"):
                    criterion = re.search(r"Criterion: (.*)", message).group(1).strip()
                    response = message.split("<response>\n", 1)[1].split("\n</response>", 1)[0]
                    reply = "yes" if criterion in response else "no"
                else:
                    blocks = message.split("<response ")[1:]
                    reply = "\n".join(f"Response {k}: correctness={b.split(chr(10))[1].count('1')}"
                                      for k, b in enumerate(blocks, 1))  # fmt: skip
                send_json(self, 200, {"choices": [{"message": {"content": reply}}]})

            def log_message(self, *args) -> None:
                pass

        self.server, self.url = serve(Handler)


@pytest.fixture
def judge():
    server = _Judge()
    yield server
    server.server.shutdown()


def _rows(path, count: int) -> None:
    lines = []
    for i in range(count):
        a, b = i % 7 + 1, i % 5 + 2
        rubric = {"essential": [str((a + b) % 10)], "additional": [str(a), str(b)]}
        lines.append(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b), "rubric": rubric}))
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("reward", ["rubric", "comparative_llm"])
def test_group_dpo_trains_on_judged_rewards(judge, reward, tmp_path):
    data = tmp_path / "rows.jsonl"
    _rows(data, 16)
    args = {"base_url": judge.url + "/v1", "model": "judge", "retries": 0, "timeout_s": 10.0, "on_failure": "skip"}
    if reward == "rubric":
        spec = {"fn": "rubric_judge", "args": {"judge_args": args}}
    else:
        spec = {
            "fn": "comparative_judge",
            "args": {"judge": "llm", "judge_args": {"criteria": ["correctness"], **args}},
        }
    overrides = [
        f"data.train={{source: '{data}'}}", f"data.eval={{source: '{data}'}}",
        f"rewards=[{{fn: exact_match, name: accuracy, weight: 0.0}}, {json.dumps(spec)}]",
        "algorithm.objective=group_dpo", "algorithm.aggregation=seq_mean_token_mean", "eval.num_prompts=4",
    ]  # fmt: skip
    out = tmp_path / "run"
    train(demo_config(overrides, out))
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert all(math.isfinite(r["loss"]) for r in records)
    assert judge.requests > 0  # the rewards came from the judge (one request per criterion / per group)
    name = spec["fn"]
    assert all(math.isfinite(r[f"reward/{name}/mean"]) for r in records)
    assert any(r["dpo/pairs"] > 0 for r in records)  # the judged rewards differ inside groups: DPO pairs form
