"""`genalign validate` accepts a config using each option added by issue 17 (items 3, 4, 7), on the causal-LM demo
(``builtin:arith-lm``), and rejects the combinations that cannot work, naming the field and the fix."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

from genalign.config import ConfigError, from_dict, to_dict
from genalign.config.schema import TrainConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BASE: dict[str, Any] = {
    "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_new_tokens": 4},
    "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "digits": 1}}},
    "rewards": [{"fn": "exact_match"}],
    "algorithm": {"group_size": 4, "prompts_per_step": 2, "micro_batch_size": 8},
}


def config(algorithm: dict[str, Any] | None = None, policy: dict[str, Any] | None = None) -> TrainConfig:
    data = copy.deepcopy(BASE)
    data["algorithm"].update(algorithm or {})
    if policy and "family" in policy:
        data["policy"] = dict(policy)  # another family: its own schema
    else:
        data["policy"].update(policy or {})
    return from_dict(TrainConfig, data)


OPTIONS = {
    "conspo": {"objective": {"name": "conspo", "temperature": 0.5, "margin_end": 0.2}},
    "disco": {"objective": {"name": "disco", "score_function": "likelihood_ratio", "tau": 1.0}},
    "disco_basic": {"objective": {"name": "disco", "negatives": "basic"}},
    "gvpo": {"objective": {"name": "gvpo", "beta": 0.1}, "advantage": "dr_grpo"},
    "reg_grpo": {"objective": {"name": "reg_grpo", "beta": 2.0}},
    "aem": {"credit": [{"name": "aem", "power": 0.5}]},
    "g2rpo": {"advantage": "gaussianized", "credit": ["length_shaping"],
              "regularizer": {"name": "entropy_band", "entropy_low": 0.1, "entropy_high": 2.0}, "regularizer_coef": 0.01},
    "em_rl": {"credit": [{"name": "entropy_reward", "level": "sequence"}]},
    "em_ft": {"regularizer": "entropy_minimization", "regularizer_coef": 0.1},
    "sspo": {"ratio_level": "sentence", "clip": "entropy_adaptive"},
    "espo_entropy": {"ratio_level": {"name": "entropy_grouped", "num_groups": 3}, "clip": "entropy_adaptive"},
    "fiberpo": {"ratio_level": {"name": "fiber", "fiber_eps_high": 0.3},
                "clip": {"name": "ppo", "eps_low": 3e-4, "eps_high": 4e-4}},
    "kl_is_correction": {"kl_coef": 0.04, "kl_importance_correction": "token"},
}  # fmt: skip


@pytest.mark.parametrize("name", list(OPTIONS))
def test_validate_accepts_each_new_option(name):
    cfg = config(OPTIONS[name])
    for key, value in OPTIONS[name].items():
        assert to_dict(getattr(cfg.algorithm, key)) == value


def test_flow_policy_accepts_the_published_cps_log_prob():
    cfg = config(
        policy={"family": "flow", "model": "some/pipeline", "dynamics": "cps", "log_prob_form": "squared_error"}
    )
    assert cfg.policy.log_prob_form == "squared_error"
    with pytest.raises(ConfigError, match="log_prob_form"):
        config(policy={"family": "flow", "model": "some/pipeline", "log_prob_form": "mse"})


@pytest.mark.parametrize(
    ("algorithm", "policy", "message"),
    [
        ({"kl_importance_correction": "token"}, None, "kl_coef = 0.0"),
        ({"kl_coef": 0.1, "kl_placement": "reward", "kl_importance_correction": "sequence"}, None, "kl_placement"),
        ({"objective": "disco", "micro_batch_size": 6}, None, "whole groups"),
        ({"ratio_level": "sentence"}, {"family": "flow", "model": "some/pipeline"}, "'segment_ids'"),
        ({"credit": ["entropy_reward", "aem"]}, None, None),
        ({"credit": ["aem", "entropy_reward"]}, None, "put it first"),
    ],
)
def test_invalid_combinations_name_the_field_and_the_fix(algorithm, policy, message):
    if message is None:
        config(algorithm, policy)
        return
    with pytest.raises(ConfigError, match=message):
        config(algorithm, policy)
