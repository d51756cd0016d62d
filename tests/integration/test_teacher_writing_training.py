"""Samples the teacher writes, through the trainer on the LM demo (``builtin:arith-lm``, tiny sizes, in this process):
each rule that has the teacher write trains a step; the explorer rollouts of ``small_to_large`` reach the update with
the teacher's sampling log-probs as behaviour log-probs (a self-teacher that sees the answer: not the student's); the
dense bridge [88] warms up on teacher rollouts, then distils on the student's samples."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import pytest
import torch

from genalign.teachers.build import build_teacher
from genalign.trainer import recipe
from tests.integration.test_method_catalogue import demo_config

pytestmark = pytest.mark.heavy(cpu_s=25)  # scheduled first (tests/conftest.py)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
MODEL_TEACHER = "algorithm.teacher={source: model, model: 'builtin:arith-lm'}"
HINTED_TEACHER = "algorithm.teacher={source: self, weights: current, context: ' {answer}'}"

#: id -> overrides: one step of each rule whose samples the teacher writes
RUNS = {
    "teacher_sft_trek": [
        HINTED_TEACHER, "algorithm.regularizer=expert_nll",
        "algorithm.sample_sources=[{name: teacher_sft, rollouts: 2, max_pass_rate: 1.0}]",
    ],
    "tgpo": [MODEL_TEACHER, "algorithm.clip=off_policy", "algorithm.sample_sources=[tgpo]"],
    "mentor": [MODEL_TEACHER, "algorithm.clip=off_policy",
               "algorithm.sample_sources=[{name: mentor, min_surprise: 0.1, span: 2}]"],
    "hapo": [HINTED_TEACHER, "algorithm.clip=off_policy", "algorithm.sample_sources=[hapo]"],
}  # fmt: skip


@pytest.mark.parametrize("overrides", list(RUNS.values()), ids=list(RUNS))
def test_each_rule_the_teacher_writes_for_trains_a_step(overrides, tmp_path):
    recipe.train(demo_config([*overrides, "run.max_steps=1"], tmp_path))
    (record,) = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert math.isfinite(record["loss"]) and math.isfinite(record["grad_norm"])
    forced = sum(value for key, value in record.items() if key.startswith("sampling/forced_"))
    assert record["teacher/written_samples"] == forced
    assert "teacher/reverse_kl" not in record  # a teacher that only writes judges nothing


def test_explorer_rollouts_reach_the_update_with_the_teachers_log_probs(tmp_path, monkeypatch):
    checked = []
    real_update = recipe.run_update

    def spy_update(policy, rollout, batch, *args, **kwargs):
        if not checked:  # step 1, before its update: the self-teacher's weights are the ones that wrote
            explored = list(range(len(rollout) - 4, len(rollout)))  # round(0.25 · 4) = 1 per prompt, forced last
            part = rollout.select(explored)
            mask = part.action_mask > 0
            teacher = build_teacher(config.algorithm.teacher, policy, batch_size=4)
            expected = teacher.judge(part, frozenset({"teacher_action_logp"}))["teacher_action_logp"]
            behaviour = batch["behaviour_logp"][explored]
            torch.testing.assert_close(behaviour[mask], expected[mask], atol=2e-4, rtol=0)
            student = policy.score(part).logp.detach()
            assert (behaviour[mask] - student[mask]).abs().max() > 1e-2  # the hinted teacher wrote, not the student
            checked.append(len(explored))
        return real_update(policy, rollout, batch, *args, **kwargs)

    monkeypatch.setattr(recipe, "run_update", spy_update)
    config = demo_config([HINTED_TEACHER, "algorithm.clip=off_policy", "run.max_steps=2",
                          "algorithm.sample_sources=[{name: small_to_large, start_fraction: 0.5, anneal_until: 1.0}]"],
                         tmp_path)  # fmt: skip
    recipe.train(config)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert checked == [4] and records[0]["sampling/small_to_large/explorer_samples"] == 4.0
    # step 1 at progress 0.5: φ = 0.25, m = 1 per prompt; the first rollout drew G − round(0.5 · 4) = 2 per prompt and
    # the top-up round 1 more: 12 learner samples instead of 16, every sample kept
    assert records[0]["sampling/small_to_large/learner_samples"] == 12.0 and records[0]["sampling/frac_kept"] == 1.0


def test_the_dense_bridge_warms_up_on_teacher_rollouts_then_distils_on_the_students(tmp_path):
    """[88]: step 1 is the forward-KL warm-up (the teacher writes every group, which it replaces: group_size 4
    rollouts per prompt), step 2 trains OPD on the student's own samples; the teacher judges throughout."""
    recipe.train(demo_config([
        MODEL_TEACHER, "algorithm.regularizer=expert_nll", "algorithm.credit=[{name: opd, reward_weight: 0.0}]",
        "algorithm.sample_sources=[{name: teacher_sft, rollouts: 4, max_pass_rate: 1.0, verified: false, "
        "until_step: 1}]",
    ], tmp_path))  # fmt: skip
    warm, distil = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert warm["teacher/written_samples"] == 16 and warm["sampling/teacher_sft/taught_prompts"] == 4
    assert warm["sampling/frac_kept"] == pytest.approx(16 / 32)  # the student's 16 samples left their groups
    assert distil["teacher/written_samples"] == 0 and distil["sampling/frac_kept"] == 1.0
    assert math.isfinite(warm["teacher/reverse_kl"]) and math.isfinite(distil["teacher/reverse_kl"])


def test_a_killed_run_whose_teacher_writes_resumes_exactly(tmp_path, monkeypatch):
    """HAPO's posteriors are checkpointed and the teacher samples with the policy's generator (restored): the resumed
    steps log what the uninterrupted run logged, teacher-written samples included."""
    from tests.experimental.sampling.test_replay_training import train_killed_in_step

    def config(out):
        return demo_config([HINTED_TEACHER, "algorithm.clip=off_policy", "run.max_steps=2", "run.save_every=1",
                            "algorithm.sample_sources=[{name: hapo, decay: 1.0}, {name: tgpo, guided: 1}]"], out)  # fmt: skip

    recipe.train(config(tmp_path / "straight"))
    expected = (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(expected[1])["teacher/written_samples"] > 0, "no writing after the checkpoint of step 1"
    crashed = tmp_path / "crashed"
    train_killed_in_step(monkeypatch, config(crashed), step=2)
    resumed = config(crashed)
    recipe.train(dataclasses.replace(resumed, run=dataclasses.replace(resumed.run, resume="latest")))
    strip = [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in expected]
    got = [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")}
           for line in (crashed / "metrics.jsonl").read_text().splitlines()]  # fmt: skip
    assert got == strip
