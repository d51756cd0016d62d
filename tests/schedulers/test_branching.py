"""Trajectory-tree bookkeeping: node indexing, evaluation counts, node rewards and per-depth advantages by hand."""

import math

import pytest
import torch

from genalign.schedulers.branching import (
    TreePlan,
    leaf_step_advantages,
    node_rewards,
    noise_aware_step_weights,
    per_depth_advantages,
    shifted_split_steps,
    width_pruning_mask,
)

SMALL = TreePlan(num_steps=3, split_steps=(0, 2), branching=2)  # 4 leaves


def test_node_layout_and_network_evaluations_of_a_small_tree():
    assert SMALL.num_leaves == 4 and SMALL.depth == 2
    assert [SMALL.nodes_at_state(t) for t in range(4)] == [1, 2, 2, 4]
    assert SMALL.node_of_leaf(1).tolist() == [0, 0, 1, 1]
    assert SMALL.node_of_leaf(3).tolist() == [0, 1, 2, 3]
    assert SMALL.stochastic_steps().tolist() == [True, False, True]
    assert SMALL.depth_after_step().tolist() == [1, 1, 2]
    assert SMALL.network_evaluations() == 1 + 2 + 2
    assert SMALL.nfe_per_leaf() == pytest.approx(5 / 4)


def test_branchgrpo_flux_setting_has_16_leaves_and_counts_203_evaluations():
    plan = TreePlan(num_steps=20, split_steps=(0, 3, 6, 9), branching=2)
    # step 0: 1 node, steps 1-3: 2, steps 4-6: 4, steps 7-9: 8, steps 10-19: 16
    assert plan.num_leaves == 16
    assert plan.network_evaluations() == 1 + 3 * 2 + 3 * 4 + 3 * 8 + 10 * 16 == 203
    late = TreePlan(num_steps=20, split_steps=(12, 14, 16, 18), branching=2)
    assert late.nfe_per_leaf() < 0.5 * 20  # late splits share more: >= 50 % fewer evaluations per leaf


def test_node_rewards_and_per_depth_advantages_match_hand_values():
    leaf_rewards = torch.tensor([[1.0, 3.0, 2.0, 6.0]])
    rewards = node_rewards(SMALL, leaf_rewards)
    assert rewards[0].tolist() == [[3.0]]
    assert rewards[1].tolist() == [[2.0, 4.0]]
    assert rewards[2].tolist() == [[1.0, 3.0, 2.0, 6.0]]
    advantages = per_depth_advantages(rewards, eps=0.0)
    assert advantages[0].tolist() == [[0.0]]
    assert torch.allclose(advantages[1], torch.tensor([[-1.0, 1.0]]))  # mean 3, std 1
    std2 = math.sqrt((4 + 0 + 1 + 9) / 4)  # leaves: mean 3, deviations -2, 0, -1, 3
    assert torch.allclose(advantages[2], torch.tensor([[-2.0, 0.0, -1.0, 3.0]]) / std2)
    steps = leaf_step_advantages(SMALL, advantages)  # step 0 and 1 -> depth 1, step 2 -> depth 2
    expected = torch.tensor(
        [[[-1, -1, -2 / std2], [-1, -1, 0.0], [1, 1, -1 / std2], [1, 1, 3 / std2]]], dtype=torch.float32
    )
    assert torch.allclose(steps, expected)


def test_probability_weighted_node_rewards_match_hand_values():
    leaf_rewards = torch.tensor([[1.0, 3.0, 2.0, 6.0]])
    logp = torch.zeros(1, 4, 3)
    logp[0, 1, 2] = math.log(3.0)  # leaf 1 is three times as likely as its sibling
    rewards = node_rewards(SMALL, leaf_rewards, weighting="probability_weighted", leaf_step_logp=logp)
    assert torch.allclose(rewards[1], torch.tensor([[0.25 * 1 + 0.75 * 3, 4.0]]))
    assert torch.allclose(rewards[0], torch.tensor([[(1 + 9 + 2 + 6) / 6]]))  # weights 1/6, 3/6, 1/6, 1/6


def test_per_depth_advantages_are_invariant_to_positive_affine_maps_of_leaf_values():
    leaf_rewards = torch.tensor([[1.0, 3.0, 2.0, 6.0], [0.0, 1.0, 1.0, 1.0]])
    plain = per_depth_advantages(node_rewards(SMALL, leaf_rewards), eps=0.0)
    mapped = per_depth_advantages(node_rewards(SMALL, 0.5 * leaf_rewards - 2.0), eps=0.0)
    for a, b in zip(plain, mapped, strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_width_pruning_keeps_the_largest_absolute_advantages():
    keep = width_pruning_mask(torch.tensor([[0.1, -2.0, 0.5, 1.5]]), keep_fraction=0.5)
    assert keep.tolist() == [[False, True, False, True]]


def test_shifted_splits_clamp_at_the_last_step():
    assert shifted_split_steps([0, 3], num_steps=10, shift=2) == (2, 5)
    assert shifted_split_steps([0, 3], num_steps=10, shift=50) == (6, 9)


def test_noise_aware_weights_are_proportional_to_std_with_mean_one_on_trained_steps():
    weights = noise_aware_step_weights(torch.tensor([3.0, 2.0, 1.0]), torch.tensor([[True, False, True]]))
    assert torch.allclose(weights, torch.tensor([[1.5, 0.0, 0.5]]))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_steps=3, split_steps=(), branching=2),
        dict(num_steps=3, split_steps=(2, 1), branching=2),
        dict(num_steps=3, split_steps=(3,), branching=2),
        dict(num_steps=3, split_steps=(0,), branching=1),
    ],
)
def test_bad_plans_are_rejected(kwargs):
    with pytest.raises(ValueError):
        TreePlan(**kwargs)
