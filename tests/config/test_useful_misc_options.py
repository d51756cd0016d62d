"""`genalign validate` accepts a config using each option of the useful-seed batch "regularisers, entropy, filtering,
clipping, aggregation" (issue 29 item 3) on the causal-LM demo (``builtin:arith-lm``), and rejects the combinations
that cannot work, naming the field and the fix."""

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
TWO_REWARDS = [{"fn": "exact_match", "name": "dense"}, {"fn": "exact_match", "name": "relevance"}]
VERIFICATION_REWARDS = [{"fn": "self_verification", "name": "solution", "args": {"part": "solution"}},
                        {"fn": "self_verification", "name": "verdict", "args": {"part": "verdict"}}]  # fmt: skip


def config(algorithm: dict[str, Any], *, policy: dict[str, Any] | None = None, rewards=None) -> TrainConfig:
    data = copy.deepcopy(BASE)
    data["algorithm"].update(algorithm)
    if policy is not None:
        data["policy"] = policy
    if rewards is not None:
        data["rewards"] = rewards
    return from_dict(TrainConfig, data)


#: option id -> (algorithm section, rewards or None)
OPTIONS: dict[str, tuple[dict[str, Any], list | None]] = {
    "spo": ({"clip": {"name": "spo", "eps": 0.3}}, None),
    "mdpo": ({"clip": "none", "regularizer": {"name": "mirror_descent_kl", "step_size": 0.5, "step_size_end": 0.1},
              "inner_epochs": 2}, None),
    "haepo": ({"objective": {"name": "plackett_luce", "temperature": 2.0}, "regularizer": "mirror_descent_kl",
               "entropy_coef": 0.001, "minibatches": 2}, None),
    "reva_po": ({"regularizer": {"name": "response_weighted_kl", "beta_max": 0.2}}, None),
    "genrec": ({"reward_combination": {"name": "relevance_gated", "threshold": 0.5},
                "regularizer": {"name": "reward_gated_nll", "min_reward": 1.0}, "regularizer_coef": 0.1},
               TWO_REWARDS),
    "la_grpo": ({"regularizer": {"name": "functional_token_anchor", "token_ids": [5, 6]},
                 "regularizer_coef": 0.5}, None),
    "dagrpo": ({"credit": [{"name": "distinct_pairs", "min_distinctiveness": 0.1}], "sample_sources": ["gcpo"]},
               None),
    "verl": ({"credit": [{"name": "effective_rank_bonus", "stride": 2, "placement": "last_action"}]}, None),
    "length_budget": ({"reward_shaping": [{"name": "length_budget_curriculum", "budget_start": 8.0,
                                           "budget_end": 2.0}]}, None),
    "value_budget": ({"sample_sources": [{"name": "value_budget", "base_samples": 2}]}, None),
    "grpo_verif": ({"credit": [{"name": "verification_weighted", "weight": 0.5}]}, VERIFICATION_REWARDS),
}  # fmt: skip


#: option id -> the policy section it needs
POLICIES = {"grpo_verif": {**BASE["policy"], "probes": {"block_markers": ["Verification:"]}}}


@pytest.mark.parametrize("name", list(OPTIONS))
def test_validate_accepts_each_option(name):
    algorithm, rewards = OPTIONS[name]
    cfg = config(algorithm, rewards=rewards, policy=POLICIES.get(name))
    for key, value in algorithm.items():
        assert to_dict(getattr(cfg.algorithm, key)) == value


def test_the_options_read_what_the_family_supplies():
    assert config(OPTIONS["reva_po"][0]).algorithm.needs() == {
        "kl": ["algorithm.regularizer = 'response_weighted_kl'"],
        "ref_entropy": ["algorithm.regularizer = 'response_weighted_kl'"],
    }
    assert config(OPTIONS["verl"][0]).algorithm.needs() == {"hidden": ["algorithm.credit rule 'effective_rank_bonus'"]}
    assert config(OPTIONS["haepo"][0]).algorithm.aggregation.name == "seq_mean_token_mean"  # the objective's own


FLOW = {"family": "flow", "model": "some/pipeline"}


@pytest.mark.parametrize(
    ("algorithm", "policy", "rewards", "message"),
    [
        ({"regularizer": "functional_token_anchor"}, None, None, r"token_ids must be a non-empty list"),
        ({"regularizer": "response_weighted_kl", "micro_batch_size": 6}, None, None,
         r"regularizer = 'response_weighted_kl' weighs samples within their group"),
        ({"regularizer": "response_weighted_kl"}, {**BASE["policy"], "reference": "none"}, None, r"'kl'"),
        ({"credit": ["effective_rank_bonus", "distinct_pairs"]}, None, None, "put it first"),
        ({"credit": ["effective_rank_bonus"]}, FLOW, None, r"'hidden'"),
        ({"reward_combination": "relevance_gated"}, None, None, r"combines at least 2 reward columns"),
        ({"sample_sources": [{"name": "value_budget", "base_samples": 6}]}, None, None, r"exceeds algorithm.group_size"),
        ({"clip": {"name": "spo", "eps_high": 0.3}}, None, None, r"Did you mean 'eps'"),
        ({"credit": ["verification_weighted"]}, None, VERIFICATION_REWARDS, r"'verification_weighted' needs 'block_ids'"),
    ],
)  # fmt: skip
def test_invalid_combinations_name_the_field_and_the_fix(algorithm, policy, rewards, message):
    with pytest.raises(ConfigError, match=message):
        config(algorithm, policy=policy, rewards=rewards)
