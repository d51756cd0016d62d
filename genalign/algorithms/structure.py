"""What the backend may know about a rollout beyond its actions: ``Rollout.structure``, a mapping of declared
signals whose producer is ``rollout`` (:mod:`genalign.algorithms.signals`), and the helpers that build, check, cut and
join it.

A family records the signals it can (listed in its capabilities) when the trainer's rollout request names them (a
family may record cheap ones unasked); a rule names the signals it reads in its registry meta ``needs``, and a config
asking for one the family cannot supply is refused at load. Every value is indexed by sample along its first axis, so
micro-batches cut it like any other per-sample tensor. ``N`` samples, ``T`` actions.

*Segment states.* Signals over segment states (``segment_values``, ``answer_probe``) describe the states between the
segments of ``segment_ids``: state ``k`` (``0 <= k <= S_i``, ``S_i`` = number of segments of sample ``i``) is the
prompt followed by the first ``k`` segments of the completion, so state 0 is the prompt alone and state ``S_i`` the
whole completion. Entries past ``S_i`` are NaN.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from genalign.algorithms.signals import SIGNALS, check_value, declare_signal, select_value, signal


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

    @property
    def num_samples(self) -> int:
        return self.node_of_action.shape[0]

    @property
    def num_actions(self) -> int:
        return self.node_of_action.shape[1]

    def select(self, index: Tensor) -> PrefixTree:
        index = index.to(self.node_of_action.device)
        return PrefixTree(self.node_of_action[index], self.depth[index])


def check_structure(structure: Mapping[str, Any], samples: int, actions: int, where: str = "Rollout.structure") -> None:
    """Every entry is a declared rollout signal (or one a sample source provides) whose value matches its declaration
    for ``samples`` x ``actions``."""
    for name, value in structure.items():
        if signal(name).producer not in ("rollout", "source"):
            raise ValueError(f"{where}: {name!r} is not a rollout structure signal (its producer is score or step)")
        check_value(name, value, samples=samples, actions=actions, where=where)


def select_structure(structure: Mapping[str, Any], index: Tensor) -> dict[str, Any]:
    """The structure of the samples at ``index`` (``[n]`` long)."""
    return {name: select_value(value, index) for name, value in structure.items()}


def cat_structures(parts: list[Mapping[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """The structure of rollouts joined along the sample axis (``sizes[i]`` samples in ``parts[i]``): a signal set
    in any non-empty part must be set in every one; tensors are right-padded to the longest per-sample axis as the
    signal declares (``Signal.pad``: zeros, each row's last entry, or NaN). A prefix tree does not join (its node ids
    are per rollout): raises ``ValueError``."""
    live = [part for part, size in zip(parts, sizes, strict=True) if size > 0]
    names = {name for part in live for name in part}
    joined: dict[str, Any] = {}
    for name in sorted(names, key=list(SIGNALS).index):
        if not all(name in part for part in live):
            raise ValueError(f"cannot join rollouts: only some carry the structure signal {name!r}")
        values = [part[name] for part in live]
        if not all(isinstance(value, Tensor) for value in values):
            raise ValueError(
                f"cannot join rollouts that carry {name!r} (a prefix tree's node ids are per rollout); "
                "tree rollouts do not combine with sample sources that add samples."
            )
        joined[name] = pad_cat(values, side="right", fill=signal(name).pad)
    return joined


def pad_cat(tensors: list[Tensor], *, side: str = "right", fill: str = "zero") -> Tensor:
    """Concatenate ``[n_i, L_i, ...]`` tensors along dim 0, padding dim 1 to the longest ``L_i`` on ``side``
    (``"left"`` or ``"right"``) with ``fill``: ``"zero"``, ``"nan"``, or ``"last"`` (each row's entry nearest to the
    padding, repeated); 1-d tensors are concatenated as they are. Trailing dims must agree."""
    if tensors[0].dim() < 2:
        return torch.cat(tensors, dim=0)
    width = max(t.shape[1] for t in tensors)
    padded = []
    for t in tensors:
        missing = width - t.shape[1]
        if missing:
            filler = _filler(t, missing, side, fill)
            t = torch.cat([filler, t] if side == "left" else [t, filler], dim=1)
        padded.append(t)
    return torch.cat(padded, dim=0)


def _filler(t: Tensor, missing: int, side: str, fill: str) -> Tensor:
    """``[n, missing, ...]``: what pads ``t`` ``[n, L, ...]`` on ``side`` (see :func:`pad_cat`)."""
    shape = (t.shape[0], missing, *t.shape[2:])
    if fill == "last" and t.shape[1] > 0:
        edge = t[:, :1] if side == "left" else t[:, -1:]
        return edge.expand(shape).clone()
    if fill == "nan":
        return t.new_full(shape, torch.nan)
    return t.new_zeros(shape)


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


def token_prefix_tree(action_ids: Tensor, mask: Tensor, group_ids: Tensor) -> PrefixTree:
    """The prefix tree of the token sequences of each group (Prefix-to-Tree of TEMPO [255]; the process sets of
    λ-GRPO [322]): two samples of a group share the node of action ``t`` exactly when their first ``t + 1`` actions
    are equal and valid. Runs of actions over which the set of sharing samples does not change form one node, so a new
    node (one level deeper) starts exactly at a branching token; actions before the first branching of a group lead
    into its root (depth 0). A padding action (``mask = 0``) ends the sample's sharing and keeps its last node.

    Args:
        action_ids: ``[N, T]`` long, the token of each action.
        mask: ``[N, T]``, 1 where an action exists.
        group_ids: ``[N]`` integer, the group (prompt) of each sample.
    Returns:
        :class:`PrefixTree` with node ids unique over the rollout (the roots are ``0 .. G - 1``).
    """
    device = action_ids.device
    action_ids, valid, group_ids = action_ids.cpu(), mask.cpu() > 0, group_ids.cpu()  # a loop of small steps: CPU
    n, steps = action_ids.shape
    _, label = group_ids.unique(return_inverse=True)  # [N] the root's label: the group
    node, depth = label.clone(), torch.zeros_like(label)  # [N]
    next_id = int(label.max()) + 1 if n else 0
    shift = int(action_ids.max()) + 2 if n and steps else 1
    own = -1 - torch.arange(n)  # a token no other sample has: padding splits off
    nodes, depths = [], []
    for t in range(steps):
        token = torch.where(valid[:, t], action_ids[:, t].long(), own)  # [N]
        _, new_label = (label * (shift + n) + token + n).unique(return_inverse=True)  # [N] refine by the token
        before = torch.bincount(label, minlength=n)[label]  # [N] samples sharing the prefix up to t - 1
        after = torch.bincount(new_label, minlength=n)[new_label]  # [N] ... and action t
        branch = valid[:, t] & (after < before)  # [N] the set of sharing samples shrinks: a new node
        _, fresh = new_label[branch].unique(return_inverse=True)
        node = node.clone()
        node[branch] = next_id + fresh
        next_id += int(fresh.max()) + 1 if fresh.numel() else 0
        depth = depth + branch.long()
        label = new_label
        nodes.append(node)
        depths.append(depth)
    if not steps:
        empty = torch.zeros(n, 0, dtype=torch.long, device=device)
        return PrefixTree(node_of_action=empty, depth=empty.clone())
    return PrefixTree(node_of_action=torch.stack(nodes, 1).to(device), depth=torch.stack(depths, 1).to(device))


declare_signal("prefix_tree", ("N", "T"), "rollout",
               "The samples of each group as the leaves of one tree of shared prefixes (node of each action, depth).",
               source="[170] BranchGRPO, [255] TEMPO, [322] lambda-GRPO, [165] Tree-GRPO", dtype=None,
               value_type=PrefixTree)  # fmt: skip
