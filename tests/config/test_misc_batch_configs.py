"""`genalign validate` accepts a config using each option of the useful-seed misc batch (issue 29 item 3: LaSeR's
self-reward in training [208], POISE's one rollout per prompt [257], ...) on the causal-LM demo (``builtin:arith-lm``), and rejects the values that cannot
work, naming the field and the fix."""

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
LASER = {"token_id": 3, "reference_logp": -20.0}


def config(algorithm: dict[str, Any]) -> TrainConfig:
    data = copy.deepcopy(BASE)
    data["algorithm"].update(algorithm)
    return from_dict(TrainConfig, data)


#: option id -> algorithm section
OPTIONS: dict[str, dict[str, Any]] = {
    "laser_self_reward_bonus": {"regularizer": {"name": "last_token_self_reward", **LASER},
                                "reward_shaping": [{"name": "self_reward_bonus", **LASER, "weight": 0.5}]},
    "poise_single_rollout": {"group_size": 1, "advantage": "reinforce",
                             "reward_shaping": [{"name": "probe_baseline", "single_rollout": True}]},
    "spo_single_stream": {"group_size": 1, "advantage": "reinforce", "sample_sources": ["spo"],
                          "reward_shaping": ["tracked_baseline"]},
}  # fmt: skip


@pytest.mark.parametrize("name", list(OPTIONS))
def test_validate_accepts_each_option(name):
    cfg = config(OPTIONS[name])
    for key, value in OPTIONS[name].items():
        assert to_dict(getattr(cfg.algorithm, key)) == value


def test_the_self_reward_bonus_reads_the_vocabulary_term_of_the_pre_update_pass():
    cfg = config(OPTIONS["laser_self_reward_bonus"])
    assert "algorithm.reward_shaping 'self_reward_bonus'" in cfg.algorithm.needs()["vocab_term"]
    assert cfg.algorithm.advantage_stage().prepass().param("vocab_term") is not None


@pytest.mark.parametrize(
    ("shaper", "message"),
    [
        ({"name": "self_reward_bonus", **LASER, "weight": -1.0}, r"weight=-1.0 must be a number >= 0"),
        ({"name": "self_reward_bonus", "token_id": 3}, r"reference_logp is required"),
        ({"name": "self_reward_bonus", **LASER, "beta": 0.0}, r"beta=0.0 must be > 0"),
    ],
)
def test_bad_self_reward_bonus_values_are_refused(shaper, message):
    with pytest.raises(ConfigError, match=message):
        config({"reward_shaping": [shaper]})


@pytest.mark.parametrize(
    ("algorithm", "message"),
    [
        (
            {"group_size": 1},
            r"algorithm.advantage 'grpo' compares the samples of a group and needs at least 2 per "
            r"prompt; set algorithm.group_size >= 2",
        ),
        (
            {"group_size": 1, "advantage": "reinforce", "reward_shaping": ["probe_baseline"]},
            r"algorithm.reward_shaping 'probe_baseline' .* set single_rollout: true on it",
        ),
        ({"group_size": 1, "advantage": "reinforce", "credit": ["grpo_ma"]}, r"algorithm.credit 'grpo_ma'"),
        ({"group_size": 1, "advantage": "reinforce", "drop_zero_std_groups": True}, r"would drop every sample"),
    ],
)
def test_one_sample_per_prompt_is_refused_per_option_with_the_fix(algorithm, message):
    with pytest.raises(ConfigError, match=message):
        config(algorithm)


def test_the_validation_anchored_reset_validates_on_a_fully_fine_tuned_lm():
    data = copy.deepcopy(BASE)
    data["eval"] = {"every": 2, "reset_to_best_every": 4}
    assert from_dict(TrainConfig, data).eval.reset_to_best_every == 4


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"reference": "none"}, r"needs a frozen reference copy to re-anchor; policy.reference = 'none'"),
        ({"lora": {"rank": 8}}, r"needs full fine-tuning \(policy.lora.rank = 0, got 8\)"),
    ],
)
def test_the_validation_anchored_reset_is_refused_where_the_reference_cannot_move(policy, message):
    data = copy.deepcopy(BASE)
    data["policy"].update(policy)
    data["eval"] = {"every": 2, "reset_to_best_every": 2}
    with pytest.raises(ConfigError, match=message):
        from_dict(TrainConfig, data)


def test_turn_phase_tracks_needs_a_multi_turn_policy():
    with pytest.raises(ConfigError, match=r"turn_ids"):
        config({"credit": [{"name": "turn_phase_tracks", "track_rewards": [[0], [0]]}]})
