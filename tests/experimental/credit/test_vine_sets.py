"""The polychromic objective on vine states [242] (credit rule ``polychromic_vine``), hand-computed: sets are drawn
among the continuations of one node of the group's prefix tree and each completion gets its set-level marginal
advantage there (trained on tree rollouts of the LM demo in tests/integration/test_useful_shaping_training.py)."""

from __future__ import annotations

import math

import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.algorithms.structure import token_prefix_tree
from genalign.experimental.credit.vine_sets import vine_pools

F64 = torch.float64
# one group of 6: s0..s2 continue the state "5 6", s3..s5 the state "5 7"
IDS = torch.tensor([[5, 6, 1], [5, 6, 2], [5, 6, 3], [5, 7, 1], [5, 7, 2], [5, 7, 3]])
GROUP = torch.zeros(6, dtype=torch.long)
#: s1 and s2 are the same completion (identical hidden states); every other pair is distinct
EMBEDDINGS = torch.eye(6)[[0, 1, 1, 3, 4, 5]]


def credit(rewards, ids=IDS, **hp):
    """``[N]``: the rule's per-action credit, checked to be the same on every action of a completion."""
    mask = torch.ones(ids.shape)
    hidden = EMBEDDINGS[: ids.shape[0], None, :].expand(ids.shape[0], ids.shape[1], 6).contiguous()  # [N, T, H]
    batch = StepBatch(mask=mask, group_ids=GROUP[: ids.shape[0]], hidden=hidden, combined_reward=torch.tensor(rewards),
                      prefix_tree=token_prefix_tree(ids, mask, GROUP[: ids.shape[0]]))  # fmt: skip
    per_action = CREDIT_RULES.get("polychromic_vine")(torch.full(ids.shape, 9.0, dtype=F64), batch, **hp)
    assert torch.equal(per_action, per_action[:, :1].expand_as(per_action))
    return per_action[:, 0]


def test_each_completion_joins_the_sets_of_its_deepest_state_with_enough_continuations():
    tree = token_prefix_tree(IDS, torch.ones(6, 3), GROUP)
    pools = vine_pools(tree, GROUP, set_size=2)
    assert pools[0] == pools[1] == pools[2] != pools[3] == pools[4] == pools[5]
    # with sets of 4 no node below the root holds enough: every completion is in the prompt's pool
    assert vine_pools(tree, GROUP, set_size=4).unique().numel() == 1


def test_marginal_set_advantage_at_each_vine_state():
    # state "5 6", r = (1, 0, 0): f(0,1) = ½, f(0,2) = ½, f(1,2) = 0·½ (a copy) -> mean ⅓; s0: ½ − ⅓, s1 = s2: ¼ − ⅓
    # state "5 7", r = (1, 1, 0), all distinct: f(3,4) = 1, f(3,5) = ½, f(4,5) = ½ -> mean ⅔; s3 = s4: ¾ − ⅔, s5: ½ − ⅔
    expected = torch.tensor([1 / 6, -1 / 12, -1 / 12, 1 / 12, 1 / 12, -1 / 6], dtype=F64)
    torch.testing.assert_close(credit([1.0, 0.0, 0.0, 1.0, 1.0, 0.0], set_size=2), expected)
    # a state with as many continuations as the set size has one set: no contrast; a missing reward gets 0
    assert credit([1.0, 0.0, 1.0, math.nan], ids=IDS[[0, 1, 3, 4]], set_size=2).tolist() == [0.0, 0.0, 0.0, 0.0]
