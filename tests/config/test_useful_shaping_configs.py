"""`genalign validate` accepts a config using each reward-shaping and advantage option of the useful-seeds batch
(DRPO [25], GRSP [112], MedLoc-R1 [121], GRPO-λ [291], LaSeR [208], TAPO [9], CAPO [57], the polychromic objective
[242] and its vine form, RiskPO [256], POISE [257], F-GRPO [303] and its ranked-list rewards, T-SPMO [312], Step-GRPO's
step markers [114], Prefix Grouper's shared-prefix scoring [58]), and refuses those whose inputs the family cannot supply, naming the
option and the missing signal."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

from genalign.config import ConfigError, from_dict
from genalign.config.schema import TrainConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")

LM: dict[str, Any] = {
    "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_new_tokens": 4},
    "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "digits": 1}}},
    "rewards": [{"fn": "exact_match"}],
    "algorithm": {"group_size": 4, "prompts_per_step": 2, "micro_batch_size": 8},
}
TWO_REWARDS = [{"fn": "exact_match"}, {"fn": "length_penalty", "name": "length"}]
LABELLED = [{"fn": "exact_match"}, {"fn": "row_label", "name": "domain", "weight": 0.0, "args": {"column": "operator"}}]

#: option -> (config changes, the signals the config must ask the family for)
OPTIONS: dict[str, tuple[dict[str, Any], set[str]]] = {
    "drpo": ({"rewards": LABELLED, "algorithm": {"reward_combination": {"name": "domain_scaled", "domain_column": 1},
                                                "advantage": "dr_grpo"}}, set()),
    "grsp": ({"algorithm": {"reward_shaping": [{"name": "segment_penalty", "coef": 0.1}]}}, {"segment_ids"}),
    "medloc": ({"algorithm": {"reward_combination": {"name": "tightening_threshold", "thresholds": [0.5, 0.75]}}},
               set()),
    "grpo_lambda": ({"rewards": TWO_REWARDS, "algorithm": {"reward_shaping": [
        {"name": "correctness_gated_length", "level": 0.5, "selection": "top_fraction"}]}}, {"rewards"}),
    "laser": ({"algorithm": {"regularizer": {"name": "last_token_self_reward", "token_id": 3, "reference_logp": -20.0},
                             "regularizer_coef": 0.1}}, {"vocab_term", "rewards"}),
    "capo": ({"algorithm": {"credit": [{"name": "auc_calibrated", "noise_margin": 0.5}]}}, {"kl", "behaviour_logp"}),
    "polychromic": ({"algorithm": {"reward_shaping": [{"name": "polychromic_sets", "set_size": 2}],
                                   "advantage": "dr_grpo"}}, {"hidden"}),
    "riskpo": ({"algorithm": {"advantage": {"name": "mixed_var", "bundle_size": 2}}}, set()),
    "poise": ({"algorithm": {"reward_shaping": ["probe_baseline"], "advantage": "reinforce"}}, {"hidden", "entropy"}),
    "fgrpo": ({"policy": {"probes": {"block_markers": ["<rank>"]}}, "rewards": TWO_REWARDS,
               "algorithm": {"ratio_level": "phase", "credit": [{"name": "role_segments", "role_rewards": [[0], [1]]}]}},
              {"block_ids"}),
    "fgrpo_ranked_list_rewards": ({"rewards": [
        {"fn": "list_coverage", "args": {"column": "answer", "marker": "<rank>", "part": "before"}},
        {"fn": "ranking_utility", "name": "utility", "args": {"column": "answer", "marker": "<rank>", "part": "after",
                                                             "k": 3}}]}, set()),
    "t_spmo_prefix_matching": ({"algorithm": {"credit": [{"name": "prefix_matching", "value": "advantage"}]}},
                               {"prefix_tree"}),
    "polychromic_vine": ({"policy": {"tree": {"enabled": True, "split_positions": [1, 2], "branching": [2, 2]}},
                          "algorithm": {"credit": [{"name": "polychromic_vine", "set_size": 2}]}},
                         {"hidden", "prefix_tree"}),
    "step_grpo_step_markers": ({"policy": {"probes": {"step_markers": ["+"]}},
                                "algorithm": {"reward_shaping": ["step_redundancy"]}}, {"segment_ids"}),
    "prefix_grouper": ({"policy": {"shared_prefix_scoring": True}}, set()),
}  # fmt: skip


def config(changes: dict[str, Any]) -> TrainConfig:
    data = copy.deepcopy(LM)
    for section, value in copy.deepcopy(changes).items():
        data[section] = {**data[section], **value} if isinstance(value, dict) else value
    return from_dict(TrainConfig, data)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_each_option_validates_with_the_causal_lm_demo(name):
    changes, signals = OPTIONS[name]
    cfg = config(changes)
    assert signals <= set(cfg.algorithm.needs())
    for key in changes.get("algorithm", {}):
        assert getattr(cfg.algorithm, key) is not None, key


def test_tapo_validates_with_a_multi_turn_vlm():
    cfg = from_dict(TrainConfig, {
        "policy": {"family": "vlm", "model": "builtin:shapes-vlm", "max_new_tokens": 8,
                   "multi_turn": {"environments": {"name": "evidence_zoom", "min_coverage": 0.5}, "max_turns": 2}},
        "data": {"train": {"source": "procedural:shapes_vqa", "args": {"size": 8, "kinds": ["ground"]}}},
        "rewards": [{"fn": "box_iou"}],
        "algorithm": {"credit": [{"name": "turn_reward_to_go", "gamma": 0.9}]},
    })  # fmt: skip
    assert {"turn_ids", "turn_rewards"} <= set(cfg.algorithm.needs())


def test_missing_inputs_and_bad_keywords_are_refused_naming_the_option():
    with pytest.raises(ConfigError, match=r"algorithm.ratio_level = 'phase' needs 'block_ids'"):
        config({"algorithm": {"ratio_level": "phase"}})
    with pytest.raises(ConfigError, match="token_id=None"):
        config({"algorithm": {"regularizer": "last_token_self_reward"}})
    with pytest.raises(ConfigError, match=r"Did you mean 'set_size'"):
        config({"algorithm": {"reward_shaping": [{"name": "polychromic_sets", "set_sise": 2}]}})
    with pytest.raises(ConfigError, match="bundle_size"):
        config({"algorithm": {"advantage": {"name": "mixed_var", "bundle_siz": 2}}})
