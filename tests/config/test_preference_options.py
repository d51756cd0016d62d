"""`genalign validate` accepts a config with each preference objective of issue 29 (item 2) on the causal-LM demo and
on the flow demo model, and refuses, at load, bad hyper-parameter values and a family without a reference policy,
naming the field, the value and the fix."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

from genalign.config import ConfigError, from_dict, to_dict
from genalign.config.schema import TrainConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")

LM_BASE: dict[str, Any] = {
    "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_new_tokens": 4},
    "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "digits": 1}}},
    "rewards": [{"fn": "exact_match"}],
    "algorithm": {"group_size": 4, "prompts_per_step": 2, "micro_batch_size": 8},
}
FLOW_POLICY = {"family": "flow", "model": "builtin:shapes-t2i-faded", "architecture": "sd3", "height": 32, "width": 32,
               "num_steps": 4, "guidance_scale": 1.0, "max_sequence_length": 1, "lora": {"rank": 4, "alpha": 8.0}}  # fmt: skip

OPTIONS = {
    "group_dpo": {"name": "group_dpo", "beta": 0.2, "pairs": "best_worst", "min_gap": 0.5},
    "mipo": {"name": "mipo", "beta": 5.0},
    "trpa": {"name": "trpa", "anisotropy": 2.0, "top_reward": 1.0, "trust_region_coef": 0.01},
    "tdpo": {"name": "tdpo", "variant": 1, "alpha": 0.3},
    "ra_dpo": {"name": "ra_dpo", "confidence": 0.9, "variant": 2},
    "p3o": {"name": "p3o", "eps": 0.1, "clip": "joint"},
    "constrained_dpo": {"name": "constrained_dpo", "margin_floor": 0.5},
    "cita": {"name": "cita", "sft_coef": 0.05, "anchor_coef": 0.2, "pairs": "all"},
    "sem_dpo": {"name": "sem_dpo", "alpha": 2.0, "similarity_column": 0},
    "tdpo_exact": {"name": "tdpo_exact", "variant": 1, "beta": 0.2},
}


def config(objective: Any, policy: dict[str, Any] | None = None, **algorithm: Any) -> TrainConfig:
    data = copy.deepcopy(LM_BASE)
    data["algorithm"] |= {"objective": objective, **algorithm}
    if policy is not None:
        data["policy"] = policy
    return from_dict(TrainConfig, data)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_validate_accepts_each_preference_objective_with_its_declared_aggregation(name):
    cfg = config(OPTIONS[name])
    assert to_dict(cfg.algorithm.objective) == OPTIONS[name]
    assert cfg.algorithm.aggregation.name == "seq_mean_token_mean"
    assert "combined_reward" in cfg.algorithm.needs()


@pytest.mark.parametrize("name", ["group_dpo", "mipo", "tdpo"])
def test_the_flow_demo_model_with_lora_supplies_the_reference_log_probs(name):
    cfg = config(name, policy=FLOW_POLICY)
    assert "ref_logp" in cfg.algorithm.needs() and "ref_logp" in cfg.policy.capabilities().signals


@pytest.mark.parametrize(
    ("objective", "policy", "message"),
    [
        ({"name": "group_dpo", "beta": -1.0}, None, r"algorithm.objective: beta=-1.0 must be > 0"),
        ({"name": "group_dpo", "pairs": "best"}, None, r"pairs='best' is not a pair selection; use one of all, best_wo"),
        ({"name": "trpa", "anisotropy": 0.5}, None, r"anisotropy >= 1"),
        ({"name": "ra_dpo", "confidence": 1.5}, None, r"confidence=1.5 must be in \(0, 1\]"),
        ({"name": "p3o", "eps": 0.0}, None, r"eps=0.0 must be in \(0, 1\)"),
        ({"name": "mipo", "temperature": 1.0}, None, r"Accepted keywords: beta, pairs, min_gap"),
        ({"name": "sem_dpo", "alpha": -1.0}, None, r"alpha=-1.0 must be >= 0"),
        ({"name": "sem_dpo", "similarity_column": "sim"}, None, r"similarity_column='sim' must be the integer"),
        ("group_dpo", {**LM_BASE["policy"], "reference": "none"}, r"needs 'ref_logp', which policy.family = "
                                                                  r"'causal_lm' with these policy options"),
        ("group_dpo", {**FLOW_POLICY, "lora": {"rank": 0}}, r"needs 'ref_logp'"),
        ("tdpo_exact", FLOW_POLICY, r"needs 'ref_forward_kl'"),
        ("tdpo_exact", {**LM_BASE["policy"], "reference": "none"}, r"needs 'ref_forward_kl'"),
    ],
)  # fmt: skip
def test_bad_values_and_families_without_a_reference_are_refused_at_load(objective, policy, message):
    with pytest.raises(ConfigError, match=message):
        config(objective, policy)


def test_p3o_needs_no_reference_and_runs_with_one_off():
    cfg = config("p3o", policy={**LM_BASE["policy"], "reference": "none"})
    assert "ref_logp" not in cfg.algorithm.needs()


def test_the_comparative_and_similarity_rewards_validate_and_unknown_arguments_are_refused():
    data = copy.deepcopy(LM_BASE)
    data["rewards"] = [{"fn": "comparative_judge", "args": {"judge": "rules", "weights": {"conciseness": 0.2}}},
                       {"fn": "prompt_similarity", "weight": 0.0, "args": {"n": 4}}]  # fmt: skip
    data["algorithm"] |= {"objective": {"name": "sem_dpo", "similarity_column": 1}}
    cfg = from_dict(TrainConfig, data)
    assert [r.fn for r in cfg.rewards] == ["comparative_judge", "prompt_similarity"]
    data["rewards"][0]["args"]["criteria"] = ["x"]
    with pytest.raises(ConfigError, match=r"rewards\[0\].args.criteria: reward 'comparative_judge' takes no argument"):
        from_dict(TrainConfig, data)


def test_t_reg_validates_with_a_contrast_teacher_and_is_refused_without_one():
    teacher = {"source": "self", "weights": "current", "context": " Answer well.", "contrast_context": " Answer badly."}
    cfg = config({"name": "t_reg", "reg_coef": 0.5}, teacher=teacher)
    assert {"teacher_action_logp", "teacher_contrast_logp", "ref_logp"} <= set(cfg.algorithm.needs())
    with pytest.raises(ConfigError, match=r"teacher_contrast_logp"):
        config("t_reg", teacher={k: v for k, v in teacher.items() if k != "contrast_context"})
    with pytest.raises(ConfigError, match=r"reg_coef=-1.0 must be >= 0"):
        config({"name": "t_reg", "reg_coef": -1.0}, teacher=teacher)


def test_inverse_q_validates_with_a_context_teacher_and_is_refused_without_a_teacher():
    cfg = config({"name": "inverse_q", "beta": 0.5}, teacher={"source": "self", "context": " {answer}"})
    assert {"teacher_action_logp", "ref_logp"} <= set(cfg.algorithm.needs())
    with pytest.raises(ConfigError, match=r"teacher_action_logp"):
        config("inverse_q")
    with pytest.raises(ConfigError, match=r"max_reward=-1.0 must be > 0"):
        config({"name": "inverse_q", "max_reward": -1.0}, teacher={"source": "self", "context": " {answer}"})
