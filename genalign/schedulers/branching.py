"""Trajectory trees for flow models: shared prefixes, splits into ``k`` children, node rewards, per-depth advantages.

BranchGRPO [170] samples the ``G`` images of a group as the leaves of one tree: all leaves start from the same noise,
run deterministic ODE steps together, and at each *split step* every node draws ``k`` independent SDE transitions
(its children). With splits at ``D`` steps the tree has ``k^D`` leaves and the transformer runs once per *node* per
step, not once per leaf, so the network evaluations per leaf drop (e.g. 4 splits at steps 0, 3, 6, 9 of 20 with
``k = 2``: 203 evaluations for 16 leaves, 12.7 per leaf instead of 20). TempFlow-GRPO [168] branches at designated
steps and weighs steps by their noise; a single split with ``k = G`` and ODE elsewhere is the G2RPO-style setting.

Layout. ``S`` steps move state ``x_t`` to ``x_{t+1}`` (``x_0`` = noise, ``x_S`` = output). The nodes holding state
``t`` are numbered ``0 .. n_t - 1`` with ``n_t = k^(number of splits < t)``; children of node ``j`` at a split are
``j k .. j k + k - 1``, so node ``j`` at state ``t`` is the ancestor of the contiguous leaves
``j L / n_t .. (j + 1) L / n_t - 1``. The *depth* of a node is the number of splits above it (root 0, leaves ``D``).

Credit (BranchGRPO [170]). A node's reward is the mean of its leaves' rewards (option: weighted by the path
probability of each leaf below the node); advantages are normalised among the nodes of the same depth of one tree;
the action at split step ``s`` that created a depth-``d`` child gets that child's advantage. Depth pruning trains
only some depths; width pruning keeps the gradient of the leaves with the largest ``|advantage|``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

NodeReward = Literal["mean", "probability_weighted"]


@dataclass(frozen=True)
class TreePlan:
    """The shape of one trajectory tree.

    Attributes:
        num_steps: ``S`` denoising steps.
        split_steps: sorted distinct steps in ``[0, S)`` where every node splits into ``branching`` children.
        branching: ``k >= 2`` children per split.
        sde_steps: further stochastic steps that do not split (one child each; e.g. a sliding SDE window).
    """

    num_steps: int
    split_steps: tuple[int, ...]
    branching: int
    sde_steps: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.num_steps < 1:
            raise ValueError(f"num_steps={self.num_steps} must be >= 1.")
        if not self.split_steps:
            raise ValueError("split_steps is empty; give at least one step where the tree branches.")
        if list(self.split_steps) != sorted(set(self.split_steps)):
            raise ValueError(f"split_steps={list(self.split_steps)} must be sorted and distinct.")
        for name, steps in (("split_steps", self.split_steps), ("sde_steps", self.sde_steps)):
            if any(not 0 <= s < self.num_steps for s in steps):
                raise ValueError(f"{name}={list(steps)} must lie in [0, num_steps={self.num_steps}).")
        if self.branching < 2:
            raise ValueError(f"branching={self.branching} must be >= 2 (children per split).")

    @property
    def depth(self) -> int:
        """``D``, the number of splits (depth of the leaves)."""
        return len(self.split_steps)

    @property
    def num_leaves(self) -> int:
        """``L = k^D``."""
        return self.branching**self.depth

    def splits_before(self, state: int) -> int:
        """Number of splits among steps ``0 .. state - 1`` (the depth of the nodes holding state ``state``)."""
        return sum(1 for s in self.split_steps if s < state)

    def nodes_at_state(self, state: int) -> int:
        """``n_t``, the number of distinct nodes holding state ``x_t`` (``t`` in ``0 .. S``)."""
        return self.branching ** self.splits_before(state)

    def node_of_leaf(self, state: int) -> Tensor:
        """``[L]`` long: the node (at state ``t``) that is the ancestor of each leaf."""
        return torch.arange(self.num_leaves) // (self.num_leaves // self.nodes_at_state(state))

    def stochastic_steps(self) -> Tensor:
        """``[S]`` bool: True at split steps and extra SDE steps."""
        mask = torch.zeros(self.num_steps, dtype=torch.bool)
        mask[list(self.split_steps) + list(self.sde_steps)] = True
        return mask

    def depth_after_step(self) -> Tensor:
        """``[S]`` long: depth of the node that step ``s`` leads into (number of splits ``<= s``)."""
        return torch.tensor([self.splits_before(s + 1) for s in range(self.num_steps)])

    def network_evaluations(self) -> int:
        """Transformer calls for one tree (one per node per step, per guidance branch)."""
        return sum(self.nodes_at_state(t) for t in range(self.num_steps))

    def nfe_per_leaf(self) -> float:
        """Network evaluations per leaf; independent rollouts need ``S``."""
        return self.network_evaluations() / self.num_leaves


def shifted_split_steps(split_steps: list[int], *, num_steps: int, shift: int) -> tuple[int, ...]:
    """Move every split ``shift`` steps later, keeping the pattern inside ``[0, S)`` (BranchGRPO-Mix / MixGRPO-style
    sliding window of stochastic steps). The shift is clamped so that the last split stays at ``S - 1`` at most."""
    shift = max(0, min(shift, num_steps - 1 - max(split_steps)))
    return tuple(s + shift for s in split_steps)


def node_rewards(
    plan: TreePlan,
    leaf_rewards: Tensor,
    *,
    weighting: NodeReward = "mean",
    leaf_step_logp: Tensor | None = None,
) -> list[Tensor]:
    """Reward of every node, depth by depth.

    Args:
        leaf_rewards: ``[B, L]`` rewards of the leaves of ``B`` trees.
        weighting: ``"mean"``: a node's reward is the mean of its leaves; ``"probability_weighted"``: the leaves are
            weighted by the probability of their path below the node, ``softmax`` over the node's leaves of
            ``sum_{s >= split of the node} log p(step s)`` (needs ``leaf_step_logp``).
        leaf_step_logp: ``[B, L, S]`` per-step log-probabilities of each leaf's path.

    Returns:
        ``D + 1`` tensors; entry ``d`` is ``[B, k^d]`` (entry ``D`` is ``leaf_rewards``).
    """
    batch, leaves = leaf_rewards.shape
    if leaves != plan.num_leaves:
        raise ValueError(f"leaf_rewards has {leaves} leaves per tree; the plan has {plan.num_leaves}.")
    if weighting not in ("mean", "probability_weighted"):
        raise ValueError(f"weighting={weighting!r} is unknown; use 'mean' or 'probability_weighted'.")
    if weighting == "probability_weighted" and leaf_step_logp is None:
        raise ValueError("weighting='probability_weighted' needs leaf_step_logp [B, L, S].")
    values = leaf_rewards.float()
    result = []
    for depth in range(plan.depth + 1):
        nodes = plan.branching**depth
        grouped = values.view(batch, nodes, leaves // nodes)  # [B, n_d, L / n_d]
        if weighting == "mean" or depth == plan.depth:
            result.append(grouped.mean(dim=2))  # [B, n_d]
            continue
        first_step = 0 if depth == 0 else plan.split_steps[depth - 1]
        path = leaf_step_logp[:, :, first_step:].float().sum(dim=2).view(batch, nodes, leaves // nodes)  # [B, n_d, ·]
        result.append((torch.softmax(path, dim=2) * grouped).sum(dim=2))  # [B, n_d]
    return result


def per_depth_advantages(rewards_by_depth: list[Tensor], *, eps: float = 1e-4) -> list[Tensor]:
    """``(R - mean_d) / (std_d + eps)`` among the nodes of each depth of each tree (population std); the root
    (depth 0, a single node) gets 0. Shapes as :func:`node_rewards`."""
    result = []
    for rewards in rewards_by_depth:  # [B, n_d]
        if rewards.shape[1] == 1:
            result.append(torch.zeros_like(rewards))
            continue
        centred = rewards - rewards.mean(dim=1, keepdim=True)  # [B, n_d]
        result.append(centred / (rewards.std(dim=1, unbiased=False, keepdim=True) + eps))
    return result


def leaf_step_advantages(plan: TreePlan, advantages_by_depth: list[Tensor]) -> Tensor:
    """``[B, L, S]``: step ``s`` of a leaf gets the advantage of its ancestor at depth ``#splits <= s`` (the node the
    step leads into): the child created by a split, or the current node for a non-splitting SDE step. Steps before
    the first split lead into the root and get 0 (they are shared by every leaf)."""
    batch = advantages_by_depth[0].shape[0]
    leaves = plan.num_leaves
    columns = []
    for depth in plan.depth_after_step().tolist():
        nodes = plan.branching**depth
        per_leaf = advantages_by_depth[depth].repeat_interleave(leaves // nodes, dim=1)  # [B, L]
        columns.append(per_leaf)
    return torch.stack(columns, dim=2).view(batch, leaves, plan.num_steps)  # [B, L, S]


def width_pruning_mask(leaf_advantages: Tensor, *, keep_fraction: float) -> Tensor:
    """``[B, L]`` bool: the ``ceil(keep_fraction L)`` leaves of each tree with the largest ``|advantage|`` (the most
    informative paths; BranchGRPO [170] width pruning cuts the gradient of the others, not their rollout)."""
    if not 0 < keep_fraction <= 1:
        raise ValueError(f"keep_fraction={keep_fraction} must be in (0, 1].")
    batch, leaves = leaf_advantages.shape
    keep = math.ceil(keep_fraction * leaves)
    order = leaf_advantages.abs().argsort(dim=1, descending=True, stable=True)  # [B, L]
    return (
        torch.zeros(batch, leaves, dtype=torch.bool).scatter(1, order[:, :keep].cpu(), True).to(leaf_advantages.device)
    )


def noise_aware_step_weights(step_std: Tensor, trained: Tensor) -> Tensor:
    """TempFlow-GRPO [168] noise-aware weights: each trained step is weighted by its transition std (its exploration
    potential; early, noisy steps weigh more), normalised to mean 1 over the trained steps of each sample.

    Args:
        step_std: ``[S]`` or ``[N, S]`` std of each step's transition at the configured noise level.
        trained: ``[N, S]`` bool, the trained steps.

    Returns:
        ``[N, S]`` float32 weights, 0 on untrained steps.
    """
    std = step_std.float().expand(trained.shape) * trained.float()  # [N, S]
    mean = std.sum(dim=1, keepdim=True) / trained.float().sum(dim=1, keepdim=True).clamp_min(1.0)  # [N, 1]
    return torch.where(mean > 0, std / mean.clamp_min(1e-12), torch.zeros_like(std))  # [N, S]
