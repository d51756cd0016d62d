"""The credit rule `tree` (BranchGRPO [170]) on a declared prefix tree, against hand values: node values (mean and
probability-weighted), per-depth normalisation, the root's zero, invariance to positive affine maps, width pruning."""

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, PrefixTree, StepBatch
from genalign.algorithms.structure import tree_from_levels

# One tree of 4 leaves over 3 steps: step 0 splits into {0, 1} | {2, 3}, step 1 is an ODE step, step 2 splits again.
NODES = [torch.tensor([0, 0, 1, 1]), torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 2, 3])]
DEPTHS = torch.tensor([1, 1, 2])
TREE = tree_from_levels(NODES, DEPTHS, num_trees=1)


def tree_credit(leaf_values, tree=TREE, groups=None, logp=None, **hp):
    n, steps = tree.node_of_action.shape
    groups = torch.zeros(n, dtype=torch.long) if groups is None else groups
    inputs = StepBatch(sample_advantages=leaf_values, mask=torch.ones(n, steps), group_ids=groups, behaviour_logp=logp, prefix_tree=tree)  # fmt: skip
    return CREDIT_RULES.get("tree")(torch.zeros(n, steps), inputs, **hp)


def test_prefix_tree_of_levels_numbers_nodes_per_depth():
    assert TREE.depth.tolist() == [[1, 1, 2]] * 4
    ids = TREE.node_of_action
    assert ids[0, 0] == ids[1, 0] == ids[0, 1] != ids[2, 0]  # the ODE step continues the depth-1 node
    assert len(set(ids[:, 2].tolist())) == 4
    two = tree_from_levels(NODES, DEPTHS, num_trees=2).node_of_action
    assert not set(two[:4].flatten().tolist()) & set(two[4:].flatten().tolist())  # trees never share nodes


def test_per_depth_advantages_match_hand_values():
    steps = tree_credit(torch.tensor([1.0, 3.0, 2.0, 6.0]), eps=0.0)
    # depth 1: nodes {1, 3} -> 2 and {2, 6} -> 4: mean 3, std 1 -> -1, +1
    assert steps[:, 0].tolist() == [-1.0, -1.0, 1.0, 1.0] and torch.equal(steps[:, 1], steps[:, 0])
    std2 = math.sqrt((4 + 0 + 1 + 9) / 4)  # leaves: mean 3, deviations -2, 0, -1, 3
    assert torch.allclose(steps[:, 2], torch.tensor([-2.0, 0.0, -1.0, 3.0]) / std2)


def test_actions_into_the_root_get_zero():
    late = tree_from_levels([torch.zeros(4, dtype=torch.long), *NODES[1:]], torch.tensor([0, 1, 2]), num_trees=1)
    steps = tree_credit(torch.tensor([1.0, 3.0, 2.0, 6.0]), late)
    assert steps[:, 0].tolist() == [0.0] * 4


def test_probability_weighted_node_values_match_hand_values():
    logp = torch.zeros(4, 3)
    logp[1, 2] = math.log(3.0)  # leaf 1 is three times as likely as its sibling below the left node
    steps = tree_credit(torch.tensor([1.0, 3.0, 2.0, 6.0]), logp=logp, node_reward="probability_weighted", eps=0.0)
    # depth 1: left node 0.25·1 + 0.75·3 = 2.5, right node 4: mean 3.25, std 0.75
    assert torch.allclose(steps[:, 0], torch.tensor([-1.0, -1.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="behaviour_logp"):
        tree_credit(torch.ones(4), node_reward="probability_weighted")


def test_invariant_to_positive_affine_maps_of_leaf_values():
    values = torch.tensor([1.0, 3.0, 2.0, 6.0])
    assert torch.allclose(tree_credit(values, eps=0.0), tree_credit(0.5 * values - 2.0, eps=0.0), atol=1e-6)


def test_width_pruning_keeps_the_largest_absolute_advantages_and_leaf_mode():
    values = torch.tensor([0.1, -2.0, 0.5, 1.5])
    kept = tree_credit(values, mode="leaf", width_keep_fraction=0.5)
    assert kept.tolist() == [[0.0] * 3, [-2.0] * 3, [0.0] * 3, [1.5] * 3]
    pruned = tree_credit(values, width_keep_fraction=0.5)
    assert torch.all(pruned[[0, 2]] == 0) and torch.all(pruned[[1, 3]] != 0)


def test_needs_the_declared_tree():
    inputs = StepBatch(
        sample_advantages=torch.ones(2), mask=torch.ones(2, 3), group_ids=torch.zeros(2, dtype=torch.long)
    )
    with pytest.raises(ValueError, match="prefix_tree"):
        CREDIT_RULES.get("tree")(torch.zeros(2, 3), inputs)
    assert isinstance(TREE, PrefixTree)
