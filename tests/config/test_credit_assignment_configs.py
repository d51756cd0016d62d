"""Configs using the credit-assignment options of issue 29 item 3 (token and segment weights, rank credit, reward
redistribution, counterfactual replay, macro actions, promising tokens) load on the causal-LM demo
(``builtin:arith-lm``), and the ones whose inputs the options cannot supply are refused, naming what is missing."""

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


def config(algorithm: dict[str, Any], policy: dict[str, Any] | None = None) -> TrainConfig:
    data = copy.deepcopy(BASE)
    data["algorithm"].update(algorithm)
    data["policy"].update(policy or {})
    return from_dict(TrainConfig, data)


OPTIONS: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {
    "grpo_sg": ({"credit": [{"name": "probability_shaping", "alpha": 3.0, "low": 0.2}]}, None),
    "delta_logp": ({"credit": [{"name": "delta_logp_weights", "beta": 0.5}]}, None),
    "temporal_schedule": ({"credit": [{"name": "scheduled_token_focus", "percentile": 0.8, "shape": "cosine"}]}, None),
    "perplexity_position": ({"credit": [{"name": "perplexity_position", "start": 0.5}]}, None),
    "thr": ({"credit": [{"name": "token_hidden_reward", "rho": -0.5}]}, None),
    "rank_grpo": ({"credit": [{"name": "rank_causal", "reward": "own"}], "ratio_level": "sentence"}, None),
    "rredcot": ({"credit": ["reward_redistribution"]}, None),
    "cort": ({"credit": [{"name": "rubric_contrast", "mix": 0.5}]}, {"probes": {"counterfactual_column": "plain"}}),
    "ma_rlhf": ({"ratio_level": {"name": "macro_action", "macro_length": 3}}, None),
    "ma_rlhf_perplexity": ({"ratio_level": {"name": "macro_action", "termination": "perplexity"}}, None),
    "rlpt": ({"regularizer": {"name": "promising_tokens", "top_k": 8}, "regularizer_coef": 1.0},
             {"top_k": 8}),
    "rlpt_reference_set": ({"regularizer": {"name": "reference_promising_tokens", "top_k": 8}}, None),
    "perceval_capo_token_rewards": ({"credit": [{"name": "judged_token_rewards", "weight": 0.2}]},
                                    {"probes": {"token_judge": {"judge": {"name": "arithmetic_claims", "scope": "step"},
                                                                "votes": 3}}}),
    "mt_error_spans": ({"credit": ["judged_token_rewards"]}, {"probes": {"token_judge": {"judge": "reference_diff"}}}),
    "red": ({"credit": ["judged_token_rewards"]},
            {"probes": {"token_judge": {"judge": {"name": "prefix_reward_gains", "reward": "exact_match"}}}}),
    "mrpo": ({"credit": [{"name": "early_step_penalty", "decay": 0.25}]},
             {"probes": {"token_judge": {"judge": {"name": "arithmetic_claims", "scope": "step"}}}}),
    "tlpo": ({"credit": [{"name": "localized_suppression", "strength": 0.5}]},
             {"probes": {"token_judge": {"judge": {"name": "script_mismatch", "language_column": "lang"}}}}),
    "tlpo_candidates": ({"credit": ["localized_suppression"], "regularizer": {
        "name": "candidate_suppression", "tokenizer": "builtin:arith-lm", "allowed_scripts": ["HANGUL", "CJK"]},
        "regularizer_coef": 0.1}, {"probes": {"token_judge": {"judge": "script_mismatch"}}}),
    "rtt": ({"credit": [{"name": "rubric_token_advantages", "reward_columns": [0]}]},
            {"probes": {"relevance_judges": [{"name": "keyword_spans", "column": "answer"}]}}),
    "rlfr": ({"credit": [{"name": "latent_flow_reward", "weight": 0.2, "fit_steps": 2}]}, None),
    "attention_entropy": ({"credit": [{"name": "attention_entropy_weights", "bias_end": 0.25}]}, None),
    "flowtracer": ({"credit": [{"name": "attention_flow_credit", "mix": 0.5}]}, {"probes": {"answer_tokens": 3}}),
    "grail": ({"credit": [{"name": "saliency_weights", "max_weight": 3.0}]}, None),
    "verl_moving_average": ({"credit": [{"name": "effective_rank_bonus", "baseline": "moving_average"}]}, None),
    "plateau_from_entropy": ({"credit": [{"name": "perplexity_position", "stage": "entropy_plateau"}]}, None),
}  # fmt: skip


@pytest.mark.parametrize("name", list(OPTIONS))
def test_validate_accepts_each_option(name):
    algorithm, policy = OPTIONS[name]
    cfg = config(algorithm, policy)
    for key, value in algorithm.items():
        assert to_dict(getattr(cfg.algorithm, key)) == value


def test_needs_reach_the_trainer():
    assert "kl" in config(OPTIONS["delta_logp"][0]).algorithm.needs()
    assert {"prefix_rewards", "segment_ids"} <= set(config(OPTIONS["rank_grpo"][0]).algorithm.needs())
    assert {"hidden", "action_ids"} <= set(config(OPTIONS["thr"][0]).algorithm.needs())


@pytest.mark.parametrize(
    ("algorithm", "policy", "message"),
    [
        ({"credit": ["rubric_contrast"]}, None, "'counterfactual_logp'"),  # the probe needs its column
        ({"credit": ["delta_logp_weights"]}, {"reference": "none"}, "'kl'"),  # Δlog p needs the reference
        ({"regularizer": "reference_promising_tokens"}, {"reference": "none"}, "'ref_vocab_term'"),  # RLPT's base set
        ({"regularizer": {"name": "reference_promising_tokens", "top_k": 0}}, None, "top_k >= 1"),
        ({"credit": ["probability_shaping", "rank_causal"]}, None, "put it first"),
        ({"credit": ["judged_token_rewards"]}, None, "'token_judgement'"),  # no token judge configured
        ({}, {"probes": {"token_judge": {"judge": "claim_checker"}}}, "unknown token judge 'claim_checker'"),
        ({}, {"probes": {"token_judge": {"judge": {"name": "arithmetic_claims", "scope": "line"}}}}, "scope='line'"),
        ({}, {"probes": {"token_judge": {"judge": "reference_diff", "votes": 0}}}, r"token_judge.votes=0 must be"),
        ({"credit": [{"name": "perplexity_position", "stage": "plateau"}]}, None, "stage='plateau'"),
        ({"credit": ["saliency_weights"]}, {"probes": {"answer_tokens": 0}}, r"answer_tokens=0 must be >= 1"),
        ({"credit": ["rubric_token_advantages"]}, None, "'constraint_relevance'"),  # no relevance judge
        ({}, {"probes": {"relevance_judges": [{"name": "keyword_spans"}]}}, r"relevance_judges\[0\].judge"),
    ],
)
def test_options_without_their_inputs_are_refused(algorithm, policy, message):
    with pytest.raises(ConfigError, match=message):
        config(algorithm, policy)


def test_rcca_loads_with_levels_rubric_rewards_and_attribution_judges():
    data = copy.deepcopy(BASE)
    data["rewards"] = [{"fn": "format_regex", "name": "format", "args": {"pattern": "[0-9]+"}},
                       {"fn": "exact_match", "name": "function"}]  # fmt: skip
    data["algorithm"].update({"reward_combination": "hierarchical_levels",
                              "credit": [{"name": "rubric_token_advantages", "reward_columns": [1]}]})  # fmt: skip
    data["policy"]["probes"] = {"relevance_judges": [{"name": "keyword_spans", "column": "answer"}]}
    cfg = from_dict(TrainConfig, data)
    assert cfg.algorithm.reward_combination.name == "hierarchical_levels"
    assert "constraint_relevance" in cfg.algorithm.needs()
