"""Tree rollouts fix the group size: a config whose algorithm.group_size differs from the tree's leaves per prompt is
rejected when it loads (not at the first rollout), for the causal-LM and the flow trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from genalign.config import load_config
from genalign.config.core import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
LM_TREE = ["policy.engine=static", "policy.tree.enabled=true", "policy.tree.split_positions=[1,2]",
           "policy.tree.branching=[2,2]", "policy.tree.trees_per_prompt=2"]  # fmt: skip


def test_lm_tree_leaves_must_equal_the_group_size():
    config = load_config(CONFIGS / "demo_arith_grpo.yaml", [*LM_TREE, "algorithm.group_size=8"])
    assert config.policy.capabilities().group_size == 8  # 2 trees x 2 x 2 leaves
    with pytest.raises(ConfigError, match=r"algorithm.group_size = 6.*groups of exactly 8.*group_size=8"):
        load_config(CONFIGS / "demo_arith_grpo.yaml", [*LM_TREE, "algorithm.group_size=6"])


def test_flow_tree_leaves_must_equal_the_group_size():
    assert load_config(CONFIGS / "branchgrpo_flux.yaml").policy.capabilities().group_size == 16
    with pytest.raises(ConfigError, match=r"algorithm.group_size = 8.*groups of exactly 16"):
        load_config(CONFIGS / "branchgrpo_flux.yaml", ["algorithm.group_size=8"])


def test_without_a_tree_any_group_size_loads():
    assert load_config(CONFIGS / "demo_arith_grpo.yaml", ["algorithm.group_size=6"]).algorithm.group_size == 6
