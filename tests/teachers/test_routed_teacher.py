"""Domain-expert teachers routed per prompt (MOPD [317], RoutedTeacher): each sample gets the judgement of its own
domain's expert (and the default teacher, or none, for the other domains), so OPD's per-token reverse KL is taken
against the routed expert."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch, bind_option
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.tiny import build_tiny_causal_lm
from genalign.teachers.build import build_teacher
from genalign.teachers.config import TeacherConfig
from genalign.teachers.routed import RoutedTeacher
from genalign.teachers.routing_options import RoutingOptions

torch.set_num_threads(1)
ROWS = [
    {"prompt": "1 + 2 =", "domain": "math"},
    {"prompt": "print(", "domain": "code"},
    {"prompt": "Hello", "domain": "chat"},
]
WANTED = frozenset({"teacher_scored", "teacher_action_logp"})


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("routed_models")
    paths = {
        name: str(build_tiny_causal_lm(root / name, architecture="qwen2", vocab_size=96, seed=seed))
        for name, seed in {"student": 0, "math": 1, "code": 2}.items()
    }
    return paths | {"general": paths["student"]}  # the default teacher: the student's own initial weights


@pytest.fixture(scope="module")
def policy(models):
    return build_policy(CausalLMPolicyConfig(model=models["student"], max_new_tokens=4, temperature=1.0))


@pytest.fixture(scope="module")
def rollout(policy):
    torch.manual_seed(0)
    return policy.rollout(ROWS, 2)  # samples 0-1 math, 2-3 code, 4-5 chat


def alone(models, name, policy, rollout):
    return build_teacher(TeacherConfig(source="model", model=models[name]), policy, batch_size=8).judge(rollout, WANTED)


def test_each_sample_is_judged_by_its_domain_expert_and_the_rest_by_the_default(models, policy, rollout):
    routing = RoutingOptions(column="domain", experts={"math": models["math"], "code": models["code"]})
    teacher = build_teacher(TeacherConfig(source="model", model=models["general"], routing=routing), policy,
                            batch_size=8)  # fmt: skip
    assert isinstance(teacher, RoutedTeacher)
    values = teacher.judge(rollout, WANTED)
    expected = {
        name: alone(models, name, policy, rollout)["teacher_action_logp"] for name in ("math", "code", "general")
    }
    for i, source in enumerate(["math", "math", "code", "code", "general", "general"]):
        torch.testing.assert_close(values["teacher_action_logp"][i], expected[source][i], atol=1e-5, rtol=0)
    assert values["teacher_scored"].all()
    # the experts differ from each other, so routing matters
    assert not torch.allclose(expected["math"][0], expected["code"][0])
    # OPD against the routed expert: δ = log π_expert − log π_student per token
    advantages = bind_option(CREDIT_RULES, "opd", {"reward_weight": 0.0})(
        torch.zeros(rollout.action_mask.shape),
        StepBatch(mask=rollout.action_mask, behaviour_logp=rollout.old_logp, progress=0.0, **values),
    )
    gap = (expected["code"][2] - rollout.old_logp[2]) * rollout.action_mask[2]
    torch.testing.assert_close(advantages[2], gap, atol=1e-5, rtol=0)


def test_without_a_default_the_unrouted_samples_are_not_scored(models, policy, rollout):
    routing = RoutingOptions(column="domain", experts={"math": models["math"]})
    teacher = build_teacher(TeacherConfig(source="model", routing=routing), policy, batch_size=8)
    values = teacher.judge(rollout, WANTED)
    assert values["teacher_scored"].tolist() == [True, True, False, False, False, False]
    assert (values["teacher_action_logp"][2:] == 0).all()
    assert teacher.take_metrics()["teacher/unrouted_samples"] == 4


def test_routing_is_checked_at_config_load(models):
    with pytest.raises(ValueError, match="give both"):
        RoutingOptions(column="domain").validate()
    with pytest.raises(ValueError, match="needs source 'model'"):
        TeacherConfig(source="self", routing=RoutingOptions(column="d", experts={"a": "x"})).validate()
    TeacherConfig(source="model", routing=RoutingOptions(column="d", experts={"a": "x"})).validate()  # no default
    with pytest.raises(ValueError, match="needs model"):
        TeacherConfig(source="model").validate()
