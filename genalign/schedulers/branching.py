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
