"""Credit on the prefix tree of a group's samples (token prefix trees of the LM families,
:func:`~genalign.algorithms.structure.token_prefix_tree`, or any declared :class:`PrefixTree`): TEMPO's temporal
differences at branching tokens [255] and λ-GRPO's process-set balance [322] (rules of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`).

A node of the tree is a *process set* in λ-GRPO's words: the samples sharing a prefix; its value ``V`` is the mean
outcome (here the sample advantage, a per-group affine map of the reward) of those samples (Prefix-to-Tree of TEMPO).
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.credit.trees import node_values
from genalign.algorithms.structure import PrefixTree


def group_means(values: Tensor, group_ids: Tensor) -> Tensor:
    """``[N]``: the mean of ``values`` ``[N]`` over each sample's group."""
    _, index = group_ids.unique(return_inverse=True)
    total = values.new_zeros(int(index.max()) + 1).index_add_(0, index, values)
    count = values.new_zeros(total.shape).index_add_(0, index, torch.ones_like(values))
    return (total / count)[index]


def temporal_differences(tree: PrefixTree, leaf_values: Tensor, group_ids: Tensor) -> Tensor:
    """``[N, T]`` ``δ_it = V(s_{t+1}) − V(s_t)``: the value of the node action ``t`` leads into minus the value of the
    node it leaves (the group's root, valued at the group mean, before the first action). Zero wherever the action
    does not branch, since a node's value is the mean over the samples through it and they do not change inside it."""
    inverse, _, node = node_values(tree, leaf_values, node_reward="mean", logp=None)  # [N, T], -, [M]
    after = node[inverse]  # [N, T] V(s_{t+1})
    root = group_means(leaf_values.float(), group_ids)[:, None]  # [N, 1]
    before = torch.cat([root, after[:, :-1]], dim=1)  # [N, T] V(s_t)
    return after - before


@CREDIT_RULES.register(
    "tree_td",
    needs=("prefix_tree",),
    formula="V(s) = mean of A_j over the samples j through prefix s; A_it ← A_it + β·(V(s_{t+1}) − V(s_t)) "
    "(non-zero only at branching tokens)",
    source="[255] TEMPO (Prefix-to-Tree values; the TD form is inferred from the abstract)",
    summary="Add the temporal difference of nonparametric prefix values at the tokens where the group's responses "
    "branch: token-level credit without a critic, GRPO everywhere else.",
)
def tree_td(advantages: Tensor, batch: StepBatch, *, td_coef: float = 1.0) -> Tensor:
    """TEMPO [255]: GRPO's advantage plus a branch-gated temporal-difference correction from the group's prefix tree.

    Prefix-to-Tree merges the group's responses into a tree of shared prefixes; a prefix's value ``V(s)`` is the mean
    normalised outcome of the responses through it. At a token where responses that shared the prefix part ways, the
    correction ``V(s_{t+1}) − V(s_t)`` credits the choice by how much better the branch taken does than the prefix
    on average; inside a shared run ``V`` is constant, the correction is 0 and TEMPO is GRPO.

    Reading chosen: the outcomes are the sample advantages (GRPO-normalised rewards, as TEMPO's "normalized reward");
    the correction is added to the incoming advantages with weight ``β`` (default 1). Any declared prefix tree works:
    the LM families build the token prefix tree of each group; the flow family's BranchGRPO trees work too.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages (the GRPO signal).
        batch: reads ``sample_advantages``, ``group_ids``, ``mask`` and ``prefix_tree``.
        td_coef: ``β >= 0``.
    Returns:
        ``[N, T]`` ``advantages + β·δ`` (0 on padding).
    """
    if not td_coef >= 0:
        raise ValueError(f"td_coef must be >= 0, got {td_coef!r}")
    tree: PrefixTree = batch.require("prefix_tree", "credit rule 'tree_td'")
    tree = PrefixTree(tree.node_of_action.cpu(), tree.depth.cpu())  # small index work: on the CPU
    leaf = batch["sample_advantages"].detach().float().cpu()  # [N]
    delta = temporal_differences(tree, leaf, batch.group_ids.cpu()).to(advantages.device, advantages.dtype)
    return torch.where(batch.mask > 0, advantages + td_coef * delta, 0.0)  # [N, T]


def process_set_sizes(tree: PrefixTree) -> Tensor:
    """``[N, T]``: how many samples pass through the node each action leads into (``|λ|`` of its process set)."""
    _, inverse = tree.node_of_action.unique(return_inverse=True)  # [N, T]
    rows = torch.arange(inverse.shape[0], device=inverse.device)[:, None].expand_as(inverse)
    member = torch.zeros(inverse.shape[0], int(inverse.max()) + 1, dtype=torch.bool, device=inverse.device)
    member[rows, inverse] = True  # [N, M] sample i passes through node m
    return member.sum(0)[inverse]  # [N, T]


@CREDIT_RULES.register(
    "process_set_balance",
    needs=("prefix_tree",),
    formula="w_it = 1/|λ(i, t)|, |λ| = number of the group's samples sharing the prefix up to action t",
    source="[322] λ-GRPO (GRPO as an implicit PRM; the exact correction is inferred from the abstract)",
    summary="Count each process step (a prefix shared by several samples of the group) once instead of once per "
    "sample that shares it.",
)
def process_set_balance(advantages: Tensor, batch: StepBatch) -> Tensor:
    """λ-GRPO [322]: GRPO's implicit process reward model, with each process step weighted once.

    Within a group, the samples sharing a prefix form a process set ``λ`` (a node of the prefix tree); GRPO's loss
    sums over samples, so the tokens of a step shared by ``|λ|`` samples enter ``|λ|`` times, each time with a
    different sample's advantage. The implicit PRM gives the step the mean advantage of ``λ``; its weight ``|λ|``
    makes steps shared by many samples (typically common openings) dominate both the exploitation of good steps and
    the suppression of bad ones. λ-GRPO removes the imbalance: every action's advantage is divided by ``|λ|``, so the
    step's total weight is its mean advantage, once.

    Reading chosen: the abstract names the flaw (non-uniformly distributed process steps) and "a simple
    modification" without its form; genalign divides by the process-set size, which makes each step count once.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask`` and ``prefix_tree``.
    Returns:
        ``[N, T]`` ``advantages / |λ|`` (0 on padding).
    """
    tree: PrefixTree = batch.require("prefix_tree", "credit rule 'process_set_balance'")
    sizes = process_set_sizes(tree).to(advantages.device, advantages.dtype)  # [N, T]
    return torch.where(batch.mask > 0, advantages / sizes, 0.0)  # [N, T]
