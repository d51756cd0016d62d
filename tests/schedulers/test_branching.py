"""Trajectory-tree plans: node indexing, evaluation counts and sliding splits by hand (the tree's credit is the
algorithms' credit rule `tree`, tests/algorithms/test_credit_trees.py)."""

import pytest

from genalign.schedulers.branching import TreePlan, shifted_split_steps

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


def test_shifted_splits_clamp_at_the_last_step():
    assert shifted_split_steps([0, 3], num_steps=10, shift=2) == (2, 5)
    assert shifted_split_steps([0, 3], num_steps=10, shift=50) == (6, 9)


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
