"""``llm_judge``: the template, the verdict parser, a tiny local causal LM judge (built from config, checked against
hand computations from its logits) and an OpenAI-compatible endpoint imitated by a server in the test."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from genalign.policies.lm.tiny import build_tiny_causal_lm, build_tiny_tokenizer
from genalign.rewards import REWARDS
from genalign.rewards.judge import LLMJudge, parse_verdict, template_fields
from genalign.rewards.runner import call_reward
from tests.misbehaving_http import BEHAVIOURS, RecordingOrigin, misbehave

TEMPLATE = "question : {prompt} answer : {completion} reference : {reference} is it right ?"
PROMPTS = ["what is 1 + 1", "what is 2 * 3", "the answer"]
COMPLETIONS = ["2", "the answer is 6", "a b c d e f g"]
REFERENCES = ["2", "6", None]


@pytest.fixture(scope="module")
def judge_folder(tmp_path_factory):
    """A tiny random Llama whose word-level tokenizer knows "yes" and "no" (one token each)."""
    tokenizer = build_tiny_tokenizer(126)
    tokenizer.add_tokens(["yes", "no"])
    return build_tiny_causal_lm(tmp_path_factory.mktemp("judge"), architecture="llama", tokenizer=tokenizer)


def _load(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True).eval()
    return model, AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def _rendered_ids(tokenizer, message: str) -> list[int]:
    text = tokenizer.apply_chat_template([{"role": "user", "content": message}], tokenize=False,
                                         add_generation_prompt=True)  # fmt: skip
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _greedy_by_hand(model, tokenizer, ids: list[int], steps: int) -> str:
    """Greedy decoding without a cache: argmax of the full forward pass, ``steps`` times (stops at eos)."""
    ids = list(ids)
    new = []
    with torch.no_grad():
        for _ in range(steps):
            token = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            if token == tokenizer.eos_token_id:
                break
            ids.append(token)
            new.append(token)
    return tokenizer.decode(new, skip_special_tokens=True)


def test_parse_verdict():
    number = {"verdict": "number", "min_score": 1, "max_score": 5}
    assert parse_verdict("Score: 4/5", **number) == pytest.approx(0.75)
    assert parse_verdict("I'd say 2.5, maybe 3", **number) == pytest.approx(0.375)
    assert parse_verdict("9", **number) == 1.0 and parse_verdict("-3", **number) == 0.0  # clipped
    assert parse_verdict(".5", verdict="number", min_score=0, max_score=1) == 0.5
    assert parse_verdict("<think>maybe 1? no, 5</think> 3", **number) == pytest.approx(0.5)
    assert parse_verdict("no number here", **number) is None
    assert parse_verdict("<think>5 but unfinished", **number) is None
    assert parse_verdict("Yes.", verdict="yes_no") == 1.0
    assert parse_verdict("NO, because", verdict="yes_no") == 0.0
    assert parse_verdict("Not sure; yes overall", verdict="yes_no") == 1.0  # "Not" is not a standalone "no"
    assert parse_verdict("<think>no...</think>yes", verdict="yes_no") == 1.0
    assert parse_verdict("maybe", verdict="yes_no") is None
    assert parse_verdict("nobody knows", verdict="yes_no") is None


def test_template_checks():
    assert template_fields("{prompt} {completion} {reference} {{literal}}") == ["prompt", "completion", "reference"]
    for bad, match in (
        ("{prompt} {0} {completion}", r"placeholder \{0\} is not valid"),
        ("{completion} {row.answer}", r"placeholder \{row.answer\} is not valid"),
        ("{completion:>10}", "is not valid"),
        ("{completion} {", "not a valid format string"),
        ("{prompt} only", r"no \{completion\} placeholder"),
    ):
        with pytest.raises(ValueError, match=match):
            template_fields(bad)


def test_template_rendering_and_unknown_columns(judge_folder):
    judge = REWARDS.get("llm_judge")(template=TEMPLATE, model_path=str(judge_folder), device="cpu")
    assert isinstance(judge, LLMJudge) and judge.local.model is None  # loaded on the first call
    chat = [{"role": "assistant", "content": COMPLETIONS[0]}]
    filled = judge.messages(PROMPTS, [chat, *COMPLETIONS[1:]], {"reference": REFERENCES, "other": [1, 2, 3]})
    assert filled == [
        "question : what is 1 + 1 answer : 2 reference : 2 is it right ?",
        "question : what is 2 * 3 answer : the answer is 6 reference : 6 is it right ?",
        None,  # the row's reference is None: not applicable
    ]
    with pytest.raises(ValueError, match=r"placeholder\(s\) \{reference\} name no column of the batch"):
        judge(PROMPTS, COMPLETIONS, answer=REFERENCES)
    assert judge.local.model is None  # the template is checked before anything loads


def test_local_generate_matches_greedy_by_hand(judge_folder):
    model, tokenizer = _load(judge_folder)
    judge = LLMJudge(template=TEMPLATE, model_path=str(judge_folder), device="cpu", max_new_tokens=4,
                     min_score=0, max_score=10, batch_size=2)  # fmt: skip
    rewards = judge(PROMPTS, COMPLETIONS, reference=REFERENCES)
    filled = judge.messages(PROMPTS, COMPLETIONS, {"reference": REFERENCES})
    replies = [_greedy_by_hand(model, tokenizer, _rendered_ids(tokenizer, m), 4) for m in filled[:2]]
    expected = [parse_verdict(r, verdict="number", min_score=0, max_score=10) for r in replies]
    assert rewards[:2] == pytest.approx([0.0 if e is None else e for e in expected])
    assert rewards[2] is None
    metrics = judge.pop_metrics()
    assert metrics["judged"] == 2 and metrics["not_applicable"] == 1
    assert metrics["unparsable"] == sum(e is None for e in expected)
    # the replies the reward parsed are the hand-decoded ones
    assert judge.local.generate(filled[:2], 4) == replies


def test_local_logprob_yes_no_by_hand(judge_folder):
    model, tokenizer = _load(judge_folder)
    yes, no = tokenizer.convert_tokens_to_ids(["yes", "no"])
    judge = LLMJudge(template=TEMPLATE, model_path=str(judge_folder), device="cpu", verdict="yes_no",
                     yes_no_mode="logprob", batch_size=2)  # fmt: skip
    rewards = judge(PROMPTS, COMPLETIONS, reference=["2", "6", "x"])
    filled = judge.messages(PROMPTS, COMPLETIONS, {"reference": ["2", "6", "x"]})
    expected = []
    for message in filled:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([_rendered_ids(tokenizer, message)])).logits[0, -1]
        p = torch.softmax(logits.double(), -1)
        expected.append((p[yes] / (p[yes] + p[no])).item())
    assert rewards == pytest.approx(expected, abs=1e-5)
    assert len({round(r, 6) for r in rewards}) == 3  # depends on the input


def test_local_errors(judge_folder, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"model_path=.*not an existing folder"):
        LLMJudge(model_path=str(tmp_path / "missing"))
    plain = build_tiny_causal_lm(tmp_path / "plain", architecture="llama")  # no "yes"/"no" tokens
    judge = LLMJudge(model_path=str(plain), verdict="yes_no", yes_no_mode="logprob", device="cpu")
    with pytest.raises(ValueError, match="no single token for 'yes'; use yes_no_mode: generate"):
        judge(["q"], ["a"])


def test_constructor_errors_name_the_field(judge_folder):
    path = str(judge_folder)
    for bad, match in (
        ({}, "give exactly one of model_path"),
        ({"model_path": path, "base_url": "http://x/v1"}, "give exactly one of model_path"),
        ({"model_path": path, "verdict": "score"}, "verdict='score' is not valid"),
        ({"model_path": path, "min_score": 5, "max_score": 5}, "min_score=5 must be below max_score=5"),
        ({"model_path": path, "max_new_tokens": 0}, "max_new_tokens=0"),
        ({"model_path": path, "template": "{prompt}"}, r"no \{completion\}"),
        ({"base_url": "http://x/v1"}, "model is not"),
        ({"base_url": "x/v1", "model": "m"}, "base_url='x/v1' is not valid"),
        ({"base_url": "http://x/v1", "model": "m", "yes_no_mode": "logprob"}, "needs the judge's logits"),
    ):
        with pytest.raises(ValueError, match=match):
            LLMJudge(**bad)


class _ChatServer:
    """Imitates ``POST /v1/chat/completions``: the reply depends on words in the user message."""

    REPLIES = {"good": "Score: 8 out of 10", "poor": "<think>10? no</think> 2", "odd": "I cannot rate this",
               "yes": "Yes, it is right.", "nope": "no"}  # fmt: skip

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict, dict]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.other = RecordingOrigin()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append((self.path, body, dict(self.headers)))
                user = body["messages"][-1]["content"]
                behaviour = next((b for b in BEHAVIOURS if b in user), None)
                if behaviour is not None:  # tests/misbehaving_http.py
                    misbehave(self, behaviour, stop=outer.stop, elsewhere=outer.other.url)
                    return
                if "fail" in user:
                    status, answer = 500, {"error": "overloaded"}
                elif "garbage" in user:
                    status, answer = 200, {"choices": []}
                else:
                    reply = next(r for word, r in outer.REPLIES.items() if word in user)
                    status, answer = 200, {"choices": [{"message": {"role": "assistant", "content": reply}}]}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()


@pytest.fixture
def chat_server():
    server = _ChatServer()
    yield server
    server.stop.set()
    server.server.shutdown()
    server.server.server_close()
    server.other.close()


def test_http_number_verdicts(chat_server, monkeypatch):
    monkeypatch.setenv("GENALIGN_TEST_JUDGE_KEY", "secret")
    judge = LLMJudge(base_url=chat_server.base_url + "/", model="judge-7b", api_key_env="GENALIGN_TEST_JUDGE_KEY",
                     template="Rate: {completion} (question {prompt}, topic {topic})", system_prompt="Be strict.",
                     max_new_tokens=16, backoff_s=0.01)  # fmt: skip
    rewards = judge(["q1", "q2", "q3"], ["good", "poor", "odd"], topic=["math", "math", "art"])
    assert rewards == pytest.approx([0.8, 0.2, 0.0])
    metrics = judge.pop_metrics()
    assert metrics["unparsable"] == 1 and metrics["judged"] == 3 and metrics["requests"] == 3
    path, body, headers = next(r for r in chat_server.requests if "good" in r[1]["messages"][-1]["content"])
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer secret"
    assert body == {
        "model": "judge-7b",
        "messages": [
            {"role": "system", "content": "Be strict."},
            {"role": "user", "content": "Rate: good (question q1, topic math)"},
        ],
        "max_tokens": 16,
        "temperature": 0,
    }


def test_http_yes_no_and_request_errors(chat_server):
    args = {"base_url": chat_server.base_url, "model": "m", "verdict": "yes_no", "template": "Judge: {completion}"}
    args |= {"retries": 1, "backoff_s": 0.01}
    skip = LLMJudge(**args, on_failure="skip")
    prompts = ["p"] * 4
    assert skip(prompts, ["yes", "nope", "fail", "garbage"]) == [1.0, 0.0, None, None]
    metrics = skip.pop_metrics()
    assert metrics["request_errors"] == 2 and metrics["retries"] == 2 and metrics["http_errors"] == 2
    assert metrics["malformed_responses"] == 2 and metrics["unparsable"] == 0
    assert sum("fail" in body["messages"][-1]["content"] for _, body, _ in chat_server.requests) == 2  # retried
    strict = LLMJudge(**args)
    with pytest.raises(RuntimeError, match=r"llm_judge: 1 of 2 requests to .*/v1/chat/completions failed"):
        strict(["p", "p"], ["yes", "fail"])
    values, errors = call_reward("judge", skip, ["p"], ["fail"], {})
    assert values != [0.0] and errors == 0  # a failed request is not applicable (NaN), not a silent zero


def test_http_misbehaving_endpoint_ends_within_the_deadline_counted_by_kind(chat_server, monkeypatch):
    """An endpoint that trickles, never answers, sends 300 MiB, deep JSON or a redirect to another origin: each
    request ends within timeout_s, scores None with on_failure: skip, and is counted by kind."""
    import time

    monkeypatch.setenv("GENALIGN_TEST_JUDGE_KEY", "secret")
    judge = LLMJudge(base_url=chat_server.base_url, model="m", verdict="yes_no", template="Judge: {completion}",
                     timeout_s=0.5, retries=0, on_failure="skip", api_key_env="GENALIGN_TEST_JUDGE_KEY")  # fmt: skip
    completions = ["yes", "trickle_body", "silent", "huge", "deep", "redirect_away"]
    start = time.perf_counter()
    assert judge(["p"] * 6, completions) == [1.0, None, None, None, None, None]
    assert time.perf_counter() - start < 0.5 + 0.4  # in parallel (max_concurrency 8), each within its deadline
    metrics = judge.pop_metrics()
    expected = {"requests": 6, "request_errors": 5, "timeouts": 2, "too_large_responses": 1, "bad_json_responses": 1,
                "redirects_refused": 1}  # fmt: skip
    assert {key: metrics[key] for key in expected} == expected
    assert chat_server.other.seen == []  # the key never went to the other origin
