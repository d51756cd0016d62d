"""What the backend may know about a rollout beyond its actions: declared, typed fields (no hidden keys).

A model family fills the fields it has (declared in its capabilities, ``genalign.policies.base.PolicyCapabilities``);
a credit rule or an objective names the fields it needs (registry meta ``needs``), and a config asking for a field the
family cannot supply is rejected at load time. Every tensor is indexed by sample along its first axis, so
:meth:`RolloutStructure.select` can cut micro-batches. ``N`` samples, ``T`` actions.

Field names (the strings used in ``needs`` and in capabilities) are the attribute names: ``prefix_tree``,
``step_std``, ``segment_ids``, ``truncated``, ``step_rewards``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor


@dataclass(frozen=True)
class PrefixTree:
    """The samples of each group as the leaves of one tree of shared prefixes (BranchGRPO [170] trajectory trees;
    LM trees that share a prefix of tokens).

    Attributes:
        node_of_action: ``[N, T]`` long, the tree node that action ``t`` of sample ``i`` leads into. Node ids are unique
            within the rollout; two samples share a node exactly when they share the path up to it. Actions before the
            first branching lead into the root of their tree.
        depth: ``[N, T]`` long, the depth of that node: the number of branchings on the path up to and including
            the action (0 = the root, shared by every sample of the group).
    """

    node_of_action: Tensor
    depth: Tensor

    def select(self, index: Tensor) -> PrefixTree:
        return PrefixTree(self.node_of_action[index], self.depth[index])


@dataclass(frozen=True)
class RolloutStructure:
    """Optional structure of a rollout; ``None`` where the family has nothing to say.

    Attributes:
        prefix_tree: the group's prefix tree (tree rollouts), see :class:`PrefixTree`.
        step_std: ``[N, T]`` float, the standard deviation of the transition each action sampled (flow SDE steps at
            their noise level; 0 for deterministic steps).
        segment_ids: ``[N, T]`` long, the segment (sentence or reasoning step) of each action, non-decreasing along
            ``T``.
        truncated: ``[N]`` bool, the sample hit the length limit before its end token.
        step_rewards: ``[N, S + 1]`` float, the reward of the output completed deterministically from each state
            ``x_0 .. x_S`` of a trajectory (DenseGRPO [148]; entry ``S`` is the final output's reward), measured by
            the family at rollout time with the trainer's reward function.
    """

    prefix_tree: PrefixTree | None = None
    step_std: Tensor | None = None
    segment_ids: Tensor | None = None
    truncated: Tensor | None = None
    step_rewards: Tensor | None = None

    def select(self, index: Tensor) -> RolloutStructure:
        """The structure of the samples at ``index`` (``[n]`` long)."""
        values: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, Tensor):
                value = value[index.to(value.device)]
            elif value is not None:
                value = value.select(index)
            values[item.name] = value
        return RolloutStructure(**values)

    def present(self) -> frozenset[str]:
        """Names of the fields that are set."""
        return frozenset(item.name for item in fields(self) if getattr(self, item.name) is not None)

    def require(self, name: str, option: str) -> Any:
        """``self.<name>``, or a ``ValueError`` naming ``option`` and the family capability it needs."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(
                f"{option} needs the rollout structure field {name!r}, which this rollout does not carry; use a "
                f"policy family (and policy options) that fill it, see `genalign list families`."
            )
        return value


STRUCTURE_FIELDS: tuple[str, ...] = tuple(item.name for item in fields(RolloutStructure))


def tree_from_levels(node_at_state: list[Tensor], depth_after_step: Tensor, *, num_trees: int) -> PrefixTree:
    """Build a :class:`PrefixTree` for ``B`` trees with a common shape.

    Args:
        node_at_state: for each step ``s`` (``S`` entries), ``[L]`` long, the node index (within its level) that the
            step of each leaf leads into; leaves of tree ``b`` are rows ``b L .. b L + L - 1`` of the result.
        depth_after_step: ``[S]`` long, the depth of the node each step leads into.
        num_trees: ``B``.

    Returns:
        ``node_of_action`` / ``depth`` ``[B L, S]`` with node ids unique over trees and depths.
    """
    leaves = node_at_state[0].shape[0]
    width = max(int(nodes.max()) + 1 for nodes in node_at_state)  # nodes per level, an upper bound
    levels = int(depth_after_step.max()) + 1
    per_tree = width * levels
    local = torch.stack([depth_after_step[s] * width + nodes for s, nodes in enumerate(node_at_state)], dim=1)
    offsets = (torch.arange(num_trees) * per_tree).repeat_interleave(leaves)[:, None]  # [B L, 1]
    node_of_action = local.repeat(num_trees, 1) + offsets  # [B L, S]
    depth = depth_after_step[None].expand(num_trees * leaves, -1).clone()  # [B L, S]
    return PrefixTree(node_of_action=node_of_action.long(), depth=depth.long())
