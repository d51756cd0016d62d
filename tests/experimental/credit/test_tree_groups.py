"""Group advantages on tree rollouts against hand-computed values: Tree-GRPO's intra- plus inter-tree levels [165]
(``tree_grpo``), GRPO-MA's thought advantage [173] (``grpo_ma``) and SPO-tree's segment advantages [41]
(``spo_tree``); accepted by the config loader with the causal LM's tree rollouts."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.algorithms.credit import check_rule_order
from genalign.algorithms.structure import PrefixTree, token_prefix_tree
from tests.algorithms.arith_config import arith_lm_config

SQRT2 = math.sqrt(2.0)


def rule(name: str, tree: PrefixTree, adv: torch.Tensor, groups: torch.Tensor, mask=None, **hp) -> torch.Tensor:
    mask = torch.ones(tree.node_of_action.shape) if mask is None else mask
    inputs = StepBatch(sample_advantages=adv, mask=mask, group_ids=groups, prefix_tree=tree)
    return CREDIT_RULES.get(name)(adv[:, None].expand(mask.shape).clone(), inputs, **hp)


def two_trees() -> PrefixTree:
    """One group, two trees of three leaves (the LM tree-rollout layout): action 0 leads into the root (nodes 0, 1),
    action 1 into each leaf's own node (2 .. 7)."""
    node = torch.tensor([[0, 2], [0, 3], [0, 4], [1, 5], [1, 6], [1, 7]])
    return PrefixTree(node_of_action=node, depth=torch.tensor([[0, 1]]).expand(6, 2).clone())


def test_tree_grpo_adds_the_intra_tree_advantage_to_the_inter_tree_one():
    adv = torch.tensor([3.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    out = rule("tree_grpo", two_trees(), adv, torch.zeros(6, dtype=torch.long))
    # tree A: mean 1, population std √2 -> (2, −1, −1)/√2; tree B: all equal -> 0
    intra = torch.tensor([SQRT2, -SQRT2 / 2, -SQRT2 / 2, 0.0, 0.0, 0.0])
    torch.testing.assert_close(out, (adv + intra)[:, None].expand(6, 2), atol=1e-5, rtol=0)
    half = rule("tree_grpo", two_trees(), adv, torch.zeros(6, dtype=torch.long), intra_coef=0.5)
    torch.testing.assert_close(half, (adv + 0.5 * intra)[:, None].expand(6, 2), atol=1e-5, rtol=0)
    mask = torch.tensor([[1.0, 0.0]] + [[1.0, 1.0]] * 5)
    assert rule("tree_grpo", two_trees(), adv, torch.zeros(6, dtype=torch.long), mask=mask)[0, 1] == 0


def test_tree_grpo_on_a_prefix_to_tree_group_is_one_tree_per_group():
    # s0..s2 share token 5, s3 starts with 4: the first action already branches, so the group is the one tree
    ids = torch.tensor([[5, 6, 7], [5, 6, 8], [5, 9, 9], [4, 9, 9], [1, 2, 3], [1, 2, 4]])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    adv = torch.tensor([1.0, 0.0, -1.0, 2.0, 1.0, -1.0])
    out = rule("tree_grpo", token_prefix_tree(ids, torch.ones(6, 3), groups), adv, groups)
    # group 0: mean 0.5, std √1.25; group 1 (shared opening: root of depth 0): mean 0, std 1
    intra = torch.tensor([0.5, -0.5, -1.5, 1.5, 1.0, -1.0]) / torch.tensor([math.sqrt(1.25)] * 4 + [1.0] * 2)
    torch.testing.assert_close(out, (adv + intra)[:, None].expand(6, 3), atol=1e-5, rtol=0)


def thoughts_and_answers() -> tuple[PrefixTree, torch.Tensor, torch.Tensor]:
    """Three groups of two-answer thoughts (one tree per thought, split at action 2):
    group 0: thoughts 0, 1; group 1: thoughts 2, 3, 4; group 2: thought 5 ended before its split, thought 6."""
    roots = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6])
    answers = torch.arange(10, 24)
    answers[10:12] = 5  # the early leaves keep their root (padding keeps the last node)
    node = torch.stack([roots, roots, answers], dim=1)  # [14, 3]
    depth = torch.tensor([[0, 0, 1]]).repeat(14, 1)
    depth[10:12] = 0
    mask = torch.ones(14, 3)
    mask[10:12, 1:] = 0
    groups = torch.tensor([0] * 4 + [1] * 6 + [2] * 4)
    return PrefixTree(node, depth), mask, groups


def test_grpo_ma_credits_thought_tokens_with_the_mean_over_their_answers():
    tree, mask, groups = thoughts_and_answers()
    adv = torch.tensor([1.0, 0.0, -1.0, -1.0, 2.0, 0.0, 1.0, 1.0, 0.0, 0.0, 5.0, 5.0, 1.0, 3.0])
    out = rule("grpo_ma", tree, adv, groups, mask=mask)
    # group 0: V = 0.5, −1 -> mean −0.25, std 0.75 -> ±1
    # group 1: V = 1, 1, 0 -> mean 2/3, std √2/3 -> (1/3)/(√2/3) = 1/√2 twice, −2/√2
    # group 2: only thought 6 has answers after a split -> a single thought: 0; the early leaves keep their advantage
    thought = torch.tensor([1.0, 1.0, -1.0, -1.0] + [1 / SQRT2] * 4 + [-SQRT2] * 2 + [0.0] * 4)
    expected = torch.stack([thought, thought, adv], dim=1)
    expected[10:12] = torch.tensor([[5.0, 0.0, 0.0]])
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


def test_grpo_ma_on_deeper_trees_uses_the_node_before_the_last_split():
    # one tree: split at action 1 into {0, 1} and {2, 3}, each split again at action 2
    node = torch.tensor([[0, 1, 3], [0, 1, 4], [0, 2, 5], [0, 2, 6]])
    depth = torch.tensor([[0, 1, 2]]).expand(4, 3).clone()
    adv = torch.tensor([1.0, 1.0, 0.0, -2.0])
    out = rule("grpo_ma", PrefixTree(node, depth), adv, torch.zeros(4, dtype=torch.long))
    # thoughts 1 (V = 1) and 2 (V = −1): ±1 on actions 0 and 1; answers keep their own
    expected = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [-1.0, -1.0, 0.0], [-1.0, -1.0, -2.0]])
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


def test_spo_tree_gives_every_token_of_a_segment_its_node_value_minus_its_parent():
    ids = torch.tensor([[5, 6, 7], [5, 6, 8], [5, 9, 9], [4, 9, 9]])
    group = torch.zeros(4, dtype=torch.long)
    adv = torch.tensor([1.0, 0.0, -1.0, 2.0])
    out = rule("spo_tree", token_prefix_tree(ids, torch.ones(4, 3), group), adv, group)
    # V: group 0.5; {s0,s1,s2} 0; {s3} 2; {s0,s1} 0.5; {s2} −1; {s0} 1; {s1} 0
    expected = torch.tensor([[-0.5, 0.5, 0.5], [-0.5, 0.5, -0.5], [-0.5, -1.0, -1.0], [1.5, 1.5, 1.5]])
    torch.testing.assert_close(out, expected)
    # two trees per prompt: a root segment gets its tree's value minus the group's mean
    adv = torch.tensor([3.0, 0.0, 0.0, 1.0, 1.0, -2.0])
    out = rule("spo_tree", two_trees(), adv, torch.zeros(6, dtype=torch.long))
    expected = torch.tensor([[0.5, 2.0], [0.5, -1.0], [0.5, -1.0], [-0.5, 1.0], [-0.5, 1.0], [-0.5, -2.0]])
    torch.testing.assert_close(out, expected)
    mask = torch.tensor([[1.0, 1.0]] * 5 + [[1.0, 0.0]])
    assert rule("spo_tree", two_trees(), adv, torch.zeros(6, dtype=torch.long), mask=mask)[5, 1] == 0


def test_rules_check_inputs_and_order_and_the_loader_accepts_them():
    inputs = StepBatch(
        sample_advantages=torch.zeros(2), mask=torch.ones(2, 2), group_ids=torch.zeros(2, dtype=torch.long)
    )
    for name in ("tree_grpo", "grpo_ma", "spo_tree"):
        with pytest.raises(ValueError, match="prefix_tree"):
            CREDIT_RULES.get(name)(torch.ones(2, 2), inputs)
    with pytest.raises(ValueError, match="intra_coef"):
        rule("tree_grpo", two_trees(), torch.zeros(6), torch.zeros(6, dtype=torch.long), intra_coef=-1.0)
    with pytest.raises(ValueError, match="put it first"):
        check_rule_order(["tree_grpo", "spo_tree"])
    config = arith_lm_config(credit=["spo_tree", "grpo_ma"])
    assert config.algorithm.needs()["prefix_tree"]
    arith_lm_config(credit=[{"name": "tree_grpo", "intra_coef": 0.5}])
