"""Configs using the reward-shaping methods (Miner, OREAL, DRA, PAPO) and the VLM token methods (PEPO, VPPO, SD-GRPO
role segments) load; a text-only family asking for a VLM-only feature is refused with a clear message."""

from __future__ import annotations

import os

import pytest

from genalign.config import ConfigError, from_dict
from genalign.config.schema import TrainConfig
from genalign.registry import Option

os.environ.setdefault("HF_HUB_OFFLINE", "1")

LM = {
    "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_new_tokens": 4},
    "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "digits": 1}}},
    "rewards": [{"fn": "exact_match"}],
}
SHAPES = {"size": 16, "seed": 0, "kinds": ["count"], "colors": ["red", "green", "blue"]}
VLM = {
    "policy": {"family": "vlm", "model": "builtin:shapes-vlm", "max_new_tokens": 8},
    "data": {"train": {"source": "procedural:shapes_vqa", "args": SHAPES}},
    "rewards": [{"fn": "count_accuracy", "name": "accuracy"}],
}


def load(base: dict, **algorithm) -> TrainConfig:
    return from_dict(TrainConfig, {**base, "algorithm": algorithm})


def test_reward_shaping_methods_load_for_causal_lms():
    miner = load(LM, credit=[{"name": "intrinsic_mastery", "gamma": 2.0}])
    assert miner.algorithm.credit == [Option("intrinsic_mastery", {"gamma": 2.0})]
    oreal = load(LM, advantage="rloo", credit=["outcome_reshaped"])
    assert oreal.algorithm.needs() == {"rewards": ["algorithm.credit rule 'outcome_reshaped'"]}
    dra = load(LM, reward_shaping=[{"name": "submodular_diversity", "eps": 0.0}])
    assert dra.algorithm.reward_shaping == [Option("submodular_diversity", {"eps": 0.0})]
    assert dra.algorithm.needs()["hidden"] == ["algorithm.reward_shaping 'submodular_diversity'"]
    papo = from_dict(
        TrainConfig,
        {
            **LM,
            "rewards": [{"fn": "exact_match"}, {"fn": "length_penalty", "name": "process"}],
            "algorithm": {"reward_combination": "outcome_process", "advantage": "dr_grpo"},
        },
    )
    assert papo.algorithm.reward_combination == Option("outcome_process")


def test_vlm_token_methods_load_for_the_vlm_family():
    pepo = load(VLM, credit=[{"name": "perception_prior", "gate_alpha": 0.05}])
    assert set(pepo.algorithm.needs()) == {"visual_similarity", "entropy"}
    vppo = load(VLM, credit=[{"name": "visual_dependency", "top_fraction": 0.4}])
    assert "logp_without_image" in vppo.algorithm.needs()
    roles = from_dict(
        TrainConfig,
        {
            **VLM,
            "policy": {**VLM["policy"], "block_markers": ["<answer>"]},
            "rewards": [{"fn": "format_regex", "name": "format"}, {"fn": "count_accuracy", "name": "accuracy"}],
            "algorithm": {"credit": [{"name": "role_segments", "role_rewards": [[0], [1]]}]},
        },
    )
    assert roles.policy.block_markers == ["<answer>"]


@pytest.mark.parametrize(("rule", "feature"), [("visual_dependency", "logp_without_image"), ("perception_prior", "visual_similarity")])  # fmt: skip
def test_a_causal_lm_asking_for_a_vlm_only_feature_is_refused(rule, feature):
    with pytest.raises(ConfigError) as err:
        load(LM, credit=[rule])
    message = str(err.value)
    assert f"algorithm.credit rule {rule!r} needs {feature!r}" in message
    assert "policy.family = 'causal_lm'" in message
    assert f"Families whose default options supply {feature!r}: vlm" in message


def test_role_segments_need_block_markers_and_shaper_options_are_checked():
    with pytest.raises(ConfigError, match="'block_ids'"):
        load(VLM, credit=["role_segments"])
    with pytest.raises(ConfigError, match="Did you mean 'submodular_diversity'"):
        load(LM, reward_shaping=["submodular_diversty"])
    with pytest.raises(ConfigError, match=r"unknown hyper-parameter.*Did you mean 'eps'"):
        load(LM, reward_shaping=[{"name": "submodular_diversity", "epz": 1}])
    with pytest.raises(ConfigError, match="block_markers"):
        from_dict(TrainConfig, {**VLM, "policy": {**VLM["policy"], "block_markers": [""]}})


def test_dyco_roles_and_token_judges_load_for_the_vlm_family():
    dyco = load(VLM, credit=[{"name": "modality_alignment_weights", "mix": 0.3}])
    assert set(dyco.algorithm.needs()) == {"modality_attention"}
    judged = from_dict(TrainConfig, {**VLM, "policy": {**VLM["policy"], "token_judge": {"judge": "counted_claims"}},
                                     "algorithm": {"credit": ["early_step_penalty"]}})  # fmt: skip
    assert judged.policy.token_judge.judge == Option("counted_claims")
    with pytest.raises(ConfigError, match="'token_judgement'"):  # no judge configured
        load(VLM, credit=["judged_token_rewards"])
    with pytest.raises(ConfigError, match="'modality_attention'"):  # a causal LM has no image to attend
        load(LM, credit=["modality_alignment_weights"])
