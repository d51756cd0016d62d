"""On-policy distillation through the trainer on the LM demo (``builtin:arith-lm``, tiny sizes, in this process):
every distillation credit rule trains with a self-teacher that sees the reference answer; OPD with a teacher model
resumes exactly after a kill (a teacher holds no state); a remote teacher that times out on every other request
leaves those samples unscored and counted, and the run goes on."""

from __future__ import annotations

import json
import math
import os
import threading
from http.server import BaseHTTPRequestHandler

import pytest

from genalign.trainer import recipe
from tests.integration.test_method_catalogue import demo_config
from tests.misbehaving_http import send_json, serve

pytestmark = pytest.mark.heavy(cpu_s=20)  # scheduled first (tests/conftest.py)

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_every_distillation_rule_trains_with_a_self_teacher_that_sees_the_answer(tmp_path):
    teacher = "{source: self, weights: current, context: ' {answer}', contrast_context: ' {other.answer}'}"
    rules = "[routed_distillation, contrastive_distillation, gated_distillation, {name: opd, reward_weight: 0.5}]"
    recipe.train(demo_config([f"algorithm.teacher={teacher}", f"algorithm.credit={rules}"], tmp_path))
    steps = records(tmp_path)
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:
        assert math.isfinite(step["loss"]) and math.isfinite(step["teacher/reverse_kl"])
        assert step["teacher/scored_samples"] == 16 and step["teacher/skipped_samples"] == 0
        assert step["teacher/contrast_unavailable"] == 0  # four prompts, four answers
    # the hinted teacher disagrees with the student: a non-zero per-token reverse KL
    assert steps[0]["teacher/reverse_kl"] != 0


class Killed(RuntimeError):
    """The simulated crash."""


def test_opd_with_a_teacher_model_resumes_exactly(tmp_path, monkeypatch):
    settings = ["algorithm.credit=[{name: opd, coef_end: 0.0}]", "run.max_steps=3", "run.save_every=1",
                "algorithm.teacher={source: model, model: 'builtin:arith-lm'}", "algorithm.minibatches=1"]  # fmt: skip
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    recipe.train(demo_config(settings, straight))
    real_step = recipe.training_step

    def crash_in_step_3(run, step):
        if step == 3:
            raise Killed("killed after the checkpoint of step 2")
        return real_step(run, step)

    monkeypatch.setattr(recipe, "training_step", crash_in_step_3)
    with pytest.raises(Killed):
        recipe.train(demo_config(settings, killed))
    monkeypatch.setattr(recipe, "training_step", real_step)
    recipe.train(demo_config([*settings, "run.resume=latest"], killed))
    without_times = lambda rows: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]  # noqa: E731
    assert without_times(records(killed)) == without_times(records(straight))
    assert records(straight)[-1]["teacher/scored_samples"] == 16


class FlakyTeacher:
    """Answers log-prob -1 per token, but every other request only after 2 s (past the client's deadline)."""

    def __init__(self) -> None:
        self.requests = 0
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests += 1
                if outer.requests % 2 == 0:
                    outer.stop.wait(2.0)
                send_json(self, 200, {"logprobs": [[-1.0] * len(ids) for ids in body["completion_token_ids"]]})

            def log_message(self, *args) -> None:
                pass

        self.server, self.url = serve(Handler)

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def test_training_goes_on_through_a_remote_teacher_that_times_out(tmp_path):
    server = FlakyTeacher()
    try:
        teacher = f"{{source: remote, batch_size: 8, remote: {{url: '{server.url}/', timeout_s: 0.5, retries: 0}}}}"
        recipe.train(demo_config([f"algorithm.teacher={teacher}", "algorithm.credit=[opd]"], tmp_path))
    finally:
        server.close()
    steps = records(tmp_path)
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:  # 16 samples in two requests of 8 per step: one answered, one timed out
        assert step["teacher/scored_samples"] == 8 and step["teacher/skipped_samples"] == 8
        assert step["teacher/timeouts"] == 1 and step["teacher/failed_samples"] == 8
        assert math.isfinite(step["loss"])


def test_full_distribution_rules_train_with_a_hinted_self_teacher_extrapolated_from_the_reference(tmp_path):
    # COPSD [107] (privileged self-teacher, vocabulary KL), AlignDistil [85] (extrapolated teacher), RTO [89] (the
    # teacher's log-ratio to its anchor), CriPO [273] (the hint as the criterion, the plain prompt as its
    # counterfactual), [93]'s length curriculum, RLMEC [225] in one run; the hint also quotes the sample's own reward
    # and output (hindsight, [43])
    distribution = "{anchor: reference, extrapolation: 1.0, chunk_size: 16}"
    context = "' {answer} ({sample.reward}: {sample.completion})'"
    teacher = (
        f"{{source: self, weights: current, context: {context}, contrast_context: '', distribution: {distribution}}}"
    )
    rules = (
        "[{name: full_distillation, reward_weight: 0.5}, aligndistil, dpo_token_reward, criterion_distillation, "
        "{name: length_curriculum_opd, length_start: 2, stage_steps: 1}, minimum_edit_reward]"
    )
    recipe.train(demo_config([f"algorithm.teacher={teacher}", f"algorithm.credit={rules}"], tmp_path))
    steps = records(tmp_path)
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:
        assert math.isfinite(step["loss"]) and step["teacher/scored_samples"] == 16


def test_opd_trains_from_domain_experts_routed_by_a_column(tmp_path):
    # MOPD [317]: the '+' and '-' prompts each go to their expert, the others to no teacher (counted)
    routing = "{column: operator, experts: {'+': 'builtin:arith-lm', '-': 'builtin:arith-lm'}}"
    teacher = f"{{source: model, routing: {routing}}}"
    recipe.train(demo_config([f"algorithm.teacher={teacher}", "algorithm.credit=[opd]"], tmp_path))
    for step in records(tmp_path):
        assert math.isfinite(step["loss"])
        assert step["teacher/scored_samples"] + step["teacher/unrouted_samples"] == 16
        assert step["teacher/skipped_samples"] == step["teacher/unrouted_samples"]
