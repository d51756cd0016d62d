"""``rubric_judge`` (rDPO [285]): each row's checklist rubric, one yes/no question per criterion to a judge endpoint
imitated in the test; the weighted fraction of satisfied criteria computed by hand, the essential gate, rows without a
rubric, malformed rubrics and failed checks."""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler

import pytest

from genalign.rewards import REWARDS
from genalign.rewards.rubric import rubric_items, rubric_score
from tests.misbehaving_http import send_json, serve


class _CriterionChat:
    """A judge that says yes when the criterion's last word appears inside the quoted response (never in the
    criterion or request text), and fails (HTTP 500) on criteria containing ``crash``."""

    def __init__(self) -> None:
        self.questions: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["messages"][-1]["content"]
                outer.questions.append(message)
                criterion = re.search(r"Criterion: (.*)", message).group(1)
                response = message.split("<response>\n", 1)[1].split("\n</response>", 1)[0]
                if "crash" in criterion:
                    send_json(self, 500, {"error": "boom"})
                    return
                verdict = "Yes." if criterion.split()[-1] in response else "No"
                send_json(self, 200, {"choices": [{"message": {"content": verdict}}]})

            def log_message(self, *args) -> None:
                pass

        self.server, self.url = serve(Handler)


@pytest.fixture
def chat():
    server = _CriterionChat()
    yield server
    server.server.shutdown()


def judge(chat, **args):
    judge_args = {"base_url": chat.url + "/v1", "model": "judge", "retries": 0, "timeout_s": 5.0, "on_failure": "skip"}
    return REWARDS.get("rubric_judge")(judge_args=judge_args, **args)


def test_the_score_is_the_weighted_fraction_of_satisfied_criteria(chat):
    rubric = {"essential": ["mentions red"], "additional": ["mentions fox", "mentions snow"]}
    reward = judge(chat, essential_weight=2.0)
    values = reward(["describe"] * 3, ["a red fox", "a fox in snow", "nothing"], rubric=[rubric] * 3)
    # red (w 2) + fox (1) of 4; fox + snow = 2 of 4; none
    assert values == [pytest.approx(0.75), pytest.approx(0.5), 0.0]
    assert len(chat.questions) == 9 and all("<response>" in q for q in chat.questions)
    gated = judge(chat, essential_gate=True)(["describe"] * 2, ["a fox in snow", "red"], rubric=[rubric] * 2)
    assert gated == [0.0, pytest.approx(0.5)]  # the essential 'red' is missed: 0 whatever else holds


def test_rows_without_a_rubric_and_failed_checks_score_none(chat):
    reward = judge(chat)
    rubrics = [None, ["mentions fox", "crash now"], ["mentions fox"]]
    assert reward(["p"] * 3, ["fox", "fox", "fox"], rubric=rubrics) == [None, None, 1.0]
    metrics = reward.pop_metrics()
    assert metrics["no_rubric"] == 1.0 and metrics["failed_checks"] == 1.0 and metrics["checks"] == 3.0


def test_rubric_forms_and_their_errors():
    assert rubric_items(["a", {"criterion": "b", "essential": True}], "rubric") == [("a", False), ("b", True)]
    assert rubric_items({"essential": ["e"]}, "rubric") == [("e", True)]
    with pytest.raises(ValueError, match=r"keys \['must'\]"):
        rubric_items({"must": ["e"]}, "rubric")
    with pytest.raises(ValueError, match="non-empty string"):
        rubric_items([""], "rubric")
    assert rubric_score([True, False, True], [True, False, False], essential_weight=3.0, essential_gate=True) == 0.8
    with pytest.raises(ValueError, match=r"essential_weight=0 must be a number > 0"):
        REWARDS.get("rubric_judge")(essential_weight=0, judge_args={"base_url": "http://x/v1", "model": "m"})
