"""Credit on prefix trees: per-depth node advantages (BranchGRPO [170]) from the rollout's declared
:class:`~genalign.algorithms.structure.PrefixTree`.

The samples of a group are the leaves of one tree. A node's value is the mean of the values of the leaves below it
(or a mean weighted by the probability of each leaf's path below the node); values are normalised among the nodes of the
same depth of one tree, and each action gets the advantage of the node it leads into. Actions that lead into the root
(before the first branching) are shared by every leaf and get 0. Leaf values are the sample advantages: node means and
per-depth normalisation are invariant to a per-group affine map with positive slope, so advantages computed from the
trainer's GRPO / Dr. GRPO advantages equal those computed from the raw rewards (up to the normalisation's ``eps``).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.structure import PrefixTree


def _membership(tree: PrefixTree) -> tuple[Tensor, Tensor]:
    """``(inverse [N, T], member [N, M])``: the dense index of each action's node and which samples pass through each
    of the ``M`` distinct nodes."""
    _, inverse = tree.node_of_action.unique(return_inverse=True)  # [N, T]
    n, num_nodes = inverse.shape[0], int(inverse.max()) + 1
    member = torch.zeros(n, num_nodes, dtype=torch.bool, device=inverse.device)
    member[torch.arange(n, device=inverse.device)[:, None].expand_as(inverse), inverse] = True
    return inverse, member


def _path_log_probs(inverse: Tensor, member: Tensor, logp: Tensor) -> Tensor:
    """``[N, M]``: each leaf's log-probability of its path from the step that created the node onward."""
    suffix = logp.float().flip(1).cumsum(1).flip(1)  # [N, T] Σ_{s ≥ t}
    n, steps = inverse.shape
    first = torch.full(member.shape, steps - 1, dtype=torch.long, device=inverse.device)  # [N, M]
    positions = torch.arange(steps, device=inverse.device).expand(n, steps)
    first = first.scatter_reduce(1, inverse, positions, reduce="amin")
    return suffix.gather(1, first)  # [N, M]


def node_values(
    tree: PrefixTree, leaf_values: Tensor, *, node_reward: Literal["mean", "probability_weighted"], logp: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """``(inverse [N, T], member [N, M], values [M])``: the value of every node of the rollout's trees."""
    inverse, member = _membership(tree)
    values = leaf_values.float()[:, None]  # [N, 1]
    if node_reward == "mean":
        weights = member.float()  # [N, M]
    else:
        path = _path_log_probs(inverse, member, logp).masked_fill(~member, -torch.inf)  # [N, M]
        weights = torch.softmax(path, dim=0).nan_to_num(0.0)  # [N, M] softmax over the leaves below each node
    node = (weights * values).sum(0) / weights.sum(0).clamp_min(1e-30)  # [M]
    return inverse, member, node


def per_depth_normalised(node: Tensor, node_depth: Tensor, node_group: Tensor, *, eps: float) -> Tensor:
    """``(v − mean) / (std + eps)`` among the nodes of the same depth of the same tree (population std); a depth with
    a single node (the root) gets 0. All ``[M]``."""
    _, key = torch.stack([node_group, node_depth]).unique(dim=1, return_inverse=True)  # [M]
    count = torch.zeros(int(key.max()) + 1, device=node.device).index_add_(0, key, torch.ones_like(node))
    mean = torch.zeros_like(count).index_add_(0, key, node) / count  # [K]
    var = torch.zeros_like(count).index_add_(0, key, (node - mean[key]) ** 2) / count
    normalised = (node - mean[key]) / (var.sqrt()[key] + eps)  # [M]
    return torch.where(count[key] > 1, normalised, 0.0)


def width_kept(leaf_values: Tensor, group_ids: Tensor, *, keep_fraction: float) -> Tensor:
    """``[N]`` bool: the ``ceil(keep_fraction L)`` leaves of each tree with the largest ``|value|`` (BranchGRPO width
    pruning cuts the gradient of the others, not their rollout); ties keep the earlier leaf."""
    keep = torch.zeros_like(group_ids, dtype=torch.bool)
    for group in group_ids.unique():
        members = (group_ids == group).nonzero().flatten()  # [L]
        order = leaf_values[members].abs().argsort(descending=True, stable=True)
        keep[members[order[: math.ceil(keep_fraction * members.numel())]]] = True
    return keep


@CREDIT_RULES.register(
    "tree",
    needs=("prefix_tree",),
    replaces=True,
    formula="R_node = mean of its leaves (or path-probability-weighted); A_node = (R − mean_d)/(std_d + ε) among the "
    "nodes of depth d of one tree; A_it = A of the node action t leads into (0 for the root)",
    source="[170] BranchGRPO (per-depth advantages, width pruning); [168] TempFlow-GRPO trees",
    summary="Per-depth advantages of the nodes of each group's prefix tree, given to the actions that create them.",
)
def tree_credit(
    advantages: Tensor,
    batch: StepBatch,
    *,
    node_reward: Literal["mean", "probability_weighted"] = "mean",
    mode: Literal["per_depth", "leaf"] = "per_depth",
    width_keep_fraction: float = 1.0,
    eps: float = 1e-4,
) -> Tensor:
    """BranchGRPO [170] credit on the rollout's prefix tree.

    Args:
        advantages: ``[N, T]`` incoming advantages (replaced: the result derives from ``batch["sample_advantages"]``).
        batch: reads ``sample_advantages`` (leaf values), ``group_ids`` (one tree per group), ``prefix_tree``
            and, for ``probability_weighted``, ``behaviour_logp``.
        node_reward: ``mean`` of the leaves below a node, or ``probability_weighted``: the leaves weighted by the
            softmax over the node's leaves of the log-probability of their path from the node's creating step on.
        mode: ``per_depth`` (each action gets its node's depth-normalised advantage) or ``leaf`` (the leaf's own).
        width_keep_fraction: fraction of leaves per tree (largest ``|advantage|``) that keep their gradient.
        eps: added to the per-depth standard deviation.
    Returns:
        ``[N, T]`` per-action advantages.
    """
    if node_reward not in ("mean", "probability_weighted"):
        raise ValueError(f"node_reward={node_reward!r} is unknown; use 'mean' or 'probability_weighted'.")
    if mode not in ("per_depth", "leaf"):
        raise ValueError(f"mode={mode!r} is unknown; use 'per_depth' or 'leaf'.")
    if not 0 < width_keep_fraction <= 1:
        raise ValueError(f"width_keep_fraction={width_keep_fraction} must be in (0, 1].")
    tree: PrefixTree = batch.require("prefix_tree", "credit rule 'tree'")
    leaf = batch["sample_advantages"].detach().float()  # [N]
    if mode == "leaf":
        result = leaf[:, None].expand(tree.node_of_action.shape).clone()  # [N, T]
    else:
        logp = batch.require("behaviour_logp", "tree") if node_reward == "probability_weighted" else None
        inverse, member, node = node_values(tree, leaf, node_reward=node_reward, logp=logp)
        node_depth = torch.zeros_like(node, dtype=torch.long).scatter_(0, inverse.flatten(), tree.depth.flatten())
        sample_of_node = member.float().argmax(0)  # [M] any sample passing through the node
        node_group = batch.group_ids[sample_of_node]
        node_advantage = per_depth_normalised(node, node_depth, node_group, eps=eps)  # [M]
        result = torch.where(tree.depth > 0, node_advantage[inverse], 0.0)  # [N, T]
    if width_keep_fraction < 1:
        kept = width_kept(leaf, batch.group_ids, keep_fraction=width_keep_fraction)  # [N]
        result = result * kept[:, None].to(result.dtype)
    return result.to(advantages.dtype)
