"""Token prefix trees of a group (``token_prefix_tree``, filled by the autoregressive families as ``prefix_tree``),
TEMPO's branch-gated temporal differences [255] (``tree_td``) and λ-GRPO's process-set balance [322]
(``process_set_balance``) against hand-computed values; accepted by the config loader on the causal LM."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.algorithms.structure import token_prefix_tree, tree_from_levels
from genalign.policies.base import RolloutRequest
from genalign.policies.lm.core import completion_structure
from tests.algorithms.arith_config import arith_lm_config

# One group of 4 responses:   s0: 5 6 7   s1: 5 6 8   s2: 5 9 9   s3: 4 9 9
IDS = torch.tensor([[5, 6, 7], [5, 6, 8], [5, 9, 9], [4, 9, 9]])
MASK = torch.ones(4, 3)
GROUP = torch.zeros(4, dtype=torch.long)
ADV = torch.tensor([1.0, 0.0, -1.0, 2.0])  # the root's value is their mean, 0.5


def rule(name: str, tree=None, adv=ADV, mask=MASK, groups=GROUP, **hp) -> torch.Tensor:
    tree = token_prefix_tree(IDS, MASK, GROUP) if tree is None else tree
    inputs = StepBatch(sample_advantages=adv, mask=mask, group_ids=groups, prefix_tree=tree)
    return CREDIT_RULES.get(name)(adv[:, None].expand(mask.shape).clone(), inputs, **hp)


def test_token_prefix_tree_starts_a_node_exactly_at_each_branching_token():
    tree = token_prefix_tree(IDS, MASK, GROUP)
    # t0: {s0, s1, s2} leave s3 (both branch: depth 1); t1: {s0, s1} | {s2}; s3 alone continues its node; t2: s0 | s1
    assert tree.depth.tolist() == [[1, 2, 3], [1, 2, 3], [1, 2, 2], [1, 1, 1]]
    node = tree.node_of_action
    assert node[0, 0] == node[1, 0] == node[2, 0] != node[3, 0] == node[3, 2]
    assert node[0, 1] == node[1, 1] != node[2, 1] == node[2, 2] and node[0, 2] != node[1, 2]
    # a shared opening leads into the root (depth 0); other groups never share nodes; padding keeps the last node
    ids = torch.tensor([[1, 2, 3], [1, 2, 4], [1, 2, 3], [1, 2, 3]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    two = token_prefix_tree(ids, mask, torch.tensor([0, 0, 1, 1]))
    assert two.depth.tolist() == [[0, 0, 1], [0, 0, 1], [0, 0, 1], [0, 0, 0]]
    assert not set(two.node_of_action[:2].flatten().tolist()) & set(two.node_of_action[2:].flatten().tolist())


def test_tempo_adds_the_temporal_difference_of_prefix_values_at_branching_tokens():
    delta = rule("tree_td", adv=ADV) - ADV[:, None]
    # V: root 0.5; {s0,s1,s2} 0; {s3} 2; {s0,s1} 0.5; {s2} −1; {s0} 1; {s1} 0  ->  δ = V(child) − V(parent)
    expected = torch.tensor([[-0.5, 0.5, 0.5], [-0.5, 0.5, -0.5], [-0.5, -1.0, 0.0], [1.5, 0.0, 0.0]])
    torch.testing.assert_close(delta, expected)
    torch.testing.assert_close(delta.sum(1), ADV - 0.5)  # the differences telescope: A_i − V(root)
    torch.testing.assert_close(rule("tree_td", td_coef=0.5) - ADV[:, None], 0.5 * expected)
    # no branching inside the group (identical responses): TEMPO is GRPO
    same = token_prefix_tree(IDS[:1].expand(4, 3), MASK, GROUP)
    torch.testing.assert_close(rule("tree_td", tree=same), ADV[:, None].expand(4, 3))


def test_tempo_works_on_any_declared_tree():
    flow_tree = tree_from_levels([torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 2, 3])], torch.tensor([1, 2]),
                                 num_trees=1)  # fmt: skip
    mask = torch.ones(4, 2)
    delta = rule("tree_td", tree=flow_tree, mask=mask) - ADV[:, None]
    # step 0: {s0, s1} = 0.5 and {s2, s3} = 0.5 against the root 0.5; step 1: each leaf against its pair
    torch.testing.assert_close(delta, torch.tensor([[0.0, 0.5], [0.0, -0.5], [0.0, -1.5], [0.0, 1.5]]))


def test_process_set_balance_divides_by_the_number_of_samples_sharing_the_prefix():
    out = rule("process_set_balance")
    sizes = torch.tensor([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0], [3.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    torch.testing.assert_close(out, ADV[:, None] / sizes)
    # a shared opening (the root) counts the whole group
    tree = token_prefix_tree(torch.tensor([[1, 2], [1, 3]]), torch.ones(2, 2), torch.zeros(2, dtype=torch.long))
    inputs = StepBatch(
        sample_advantages=torch.ones(2), mask=torch.ones(2, 2), group_ids=torch.zeros(2).long(), prefix_tree=tree
    )
    assert CREDIT_RULES.get("process_set_balance")(torch.ones(2, 2), inputs).tolist() == [[0.5, 1.0], [0.5, 1.0]]


def test_rules_name_the_missing_tree():
    inputs = StepBatch(sample_advantages=ADV, mask=MASK, group_ids=GROUP)
    with pytest.raises(ValueError, match="prefix_tree"):
        CREDIT_RULES.get("tree_td")(torch.ones(4, 3), inputs)


def test_autoregressive_families_declare_the_token_prefix_tree():
    structure = completion_structure(RolloutRequest(structure=frozenset({"prefix_tree"})), None, torch.zeros(4, dtype=torch.bool),
                                     IDS, MASK, group_ids=GROUP)  # fmt: skip
    assert torch.equal(structure["prefix_tree"].depth, token_prefix_tree(IDS, MASK, GROUP).depth)
    assert (
        completion_structure(RolloutRequest(), None, torch.zeros(4, dtype=torch.bool), IDS, MASK).get("prefix_tree")
        is None
    )
    config = arith_lm_config(credit=[{"name": "tree_td", "td_coef": 0.5}, "process_set_balance"])
    assert config.algorithm.needs()["prefix_tree"]
