"""A config using each turn-level option of issue 26 item 4 validates with a multi-turn causal LM (the structure it
reads is what the multi-turn rollout records), and the same options are refused for a single-turn causal LM, naming
the option and the missing signal."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

from genalign.config import ConfigError, from_dict
from genalign.config.schema import TrainConfig
from genalign.policies.lm.tiny import build_tiny_causal_lm

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SCRIPTED = "tests.policies.lm.scripted_environments:Scripted"

#: option -> (algorithm fields, the structure it reads from the rollout)
OPTIONS: dict[str, tuple[dict[str, Any], set[str]]] = {
    "turn_reward_to_go": ({"credit": [{"name": "turn_reward_to_go", "gamma": 0.9}]}, {"turn_ids", "turn_rewards"}),
    "steppo": ({"credit": ["turn_baseline", "step_aligned"], "ratio_level": "turn"}, {"turn_ids", "turn_rewards"}),
    "hcapo": ({"credit": [{"name": "hcapo", "coef": 0.5}]}, {"turn_ids", "action_ids"}),
    "at_grpo": ({"credit": [{"name": "at_grpo", "team_coef": 0.5}]}, {"turn_ids", "turn_rewards"}),
    "turn_ppo": ({"credit": [{"name": "turn_baseline", "gamma": 0.95, "lam": 0.9}]}, {"turn_ids", "turn_rewards"}),
    "turn_ppo_critic": (
        {"credit": [{"name": "turn_critic", "gamma": 0.95, "lam": 0.9, "projection_dim": 16}]},
        {"turn_ids", "turn_rewards", "hidden"},
    ),
    "aem_turns": ({"credit": [{"name": "aem_turns", "power": 0.5}]}, {"turn_ids"}),
    "t2po_gate": ({"credit": [{"name": "turn_progress_gate", "threshold": 0.1}]}, {"turn_ids"}),
    "otc": ({"reward_shaping": [{"name": "otc", "mode": "grpo", "alpha": 1.0}]}, {"tool_calls"}),
    "triage": ({"credit": [{"name": "triage", "regression": -0.4}]}, {"turn_ids", "turn_roles"}),
}


@pytest.fixture(scope="module")
def multi_turn(tmp_path_factory) -> dict[str, Any]:
    model = build_tiny_causal_lm(tmp_path_factory.mktemp("models") / "qwen2", vocab_size=96)
    return {
        "policy": {"family": "causal_lm", "model": str(model), "max_new_tokens": 4, "use_chat_template": True,
                   "multi_turn": {"environments": SCRIPTED, "max_turns": 2}},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "digits": 1}}},
        "rewards": [{"fn": "environment", "args": {"fallback": "exact_match"}}],
        "algorithm": {"group_size": 2, "prompts_per_step": 2, "micro_batch_size": 4},
    }  # fmt: skip


def with_algorithm(base: dict[str, Any], algorithm: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(base)
    data["algorithm"].update(copy.deepcopy(algorithm))
    return data


@pytest.mark.parametrize("option", list(OPTIONS))
def test_each_turn_option_validates_with_a_multi_turn_causal_lm(multi_turn, option):
    algorithm, structure = OPTIONS[option]
    config = from_dict(TrainConfig, with_algorithm(multi_turn, algorithm))
    assert structure <= set(config.algorithm.needs())


def test_turn_options_are_refused_for_a_single_turn_causal_lm(multi_turn):
    single = copy.deepcopy(multi_turn)
    del single["policy"]["multi_turn"]
    single["rewards"] = [{"fn": "exact_match"}]
    with pytest.raises(ConfigError, match=r"credit rule 'at_grpo'.* needs 'turn_ids'.*causal_lm"):
        from_dict(TrainConfig, with_algorithm(single, OPTIONS["at_grpo"][0]))
    with pytest.raises(ConfigError, match=r"algorithm.reward_shaping 'otc' needs 'tool_calls'"):
        from_dict(TrainConfig, with_algorithm(single, OPTIONS["otc"][0]))
    with pytest.raises(ConfigError, match=r"credit rule 'triage'.* needs 'turn_ids'"):
        from_dict(TrainConfig, with_algorithm(single, OPTIONS["triage"][0]))


def test_turn_level_trees_fix_the_group_size(multi_turn):
    """Tree-GRPO [165] at turn boundaries: tree_grpo reads the turn-level sampling tree, and algorithm.group_size must
    be trees_per_prompt × prod(branching)."""
    data = copy.deepcopy(multi_turn)
    data["policy"]["multi_turn"]["tree"] = {
        "enabled": True,
        "split_turns": [1],
        "branching": [2],
        "trees_per_prompt": 2,
    }
    config = from_dict(TrainConfig, with_algorithm(data, {"group_size": 4, "credit": ["tree_grpo"]}))
    assert "prefix_tree" in config.algorithm.needs()
    with pytest.raises(ConfigError, match=r"group_size"):
        from_dict(TrainConfig, with_algorithm(data, {"group_size": 2, "credit": ["tree_grpo"]}))
    data["policy"]["multi_turn"]["tree"]["split_turns"] = [2]
    with pytest.raises(ConfigError, match=r"split_turns=\[2\] must be < policy.multi_turn.max_turns=2"):
        from_dict(TrainConfig, with_algorithm(data, {"group_size": 4}))
