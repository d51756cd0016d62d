"""What the backend may know about a rollout beyond its actions: declared, typed fields (no hidden keys).

A model family fills the fields it has (declared in its capabilities, ``genalign.policies.base.PolicyCapabilities``);
a credit rule or an objective names the fields it needs (registry meta ``needs``), and a config asking for a field the
family cannot supply is rejected at load time. Every tensor is indexed by sample along its first axis, so
:meth:`RolloutStructure.select` can cut micro-batches. ``N`` samples, ``T`` actions.

Field names (the strings used in ``needs`` and in capabilities) are the attribute names: ``prefix_tree``,
``step_std``, ``segment_ids``, ``truncated``, ``step_rewards``, ``action_ids``, ``segment_values``, ``answer_probe``,
``teacher_logp``, ``block_ids``, ``path_logp``.

*Segment states.* ``segment_values`` and ``answer_probe`` describe the states between the segments of
``segment_ids``: state ``k`` (``0 <= k <= S_i``, ``S_i`` = number of segments of sample ``i``) is the prompt followed
by the first ``k`` segments of the completion, so state 0 is the prompt alone and state ``S_i`` the whole completion.
Entries past ``S_i`` are NaN.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

#: Channels of ``RolloutStructure.answer_probe`` (last axis).
ANSWER_LOGP, ANSWER_MEAN_PROB, ANSWER_ENTROPY = 0, 1, 2


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
        action_ids: ``[N, T]`` long, the token id of each action (token families; 0 on padding).
        segment_values: ``[N, S + 1]`` float, a Monte-Carlo estimate of the expected reward from each segment state
            (module docstring): the mean reward of continuations sampled from state ``k``; entry ``S_i`` is the
            sample's own reward, state 0 uses the group's samples (SPO-chain [41]). Measured at rollout time with the
            trainer's reward function.
        answer_probe: ``[N, S + 1, 3]`` float, the reference answer teacher-forced after each segment state and a probe
            text (belief probing [194], SPAE [193]): channel :data:`ANSWER_LOGP` the answer's log-probability,
            :data:`ANSWER_MEAN_PROB` the mean probability of its tokens, :data:`ANSWER_ENTROPY` the mean entropy of
            the next-token distributions at its tokens.
        teacher_logp: ``[N, T]`` float, the log-probability of each action under the same model given privileged
            information (the row's reference answer) in the prompt (self-distillation teacher, RLSD [132]).
        block_ids: ``[N, T]`` long, the text block of each action: the number of configured block markers that start
            at or before the action (blockwise advantages [56]); non-decreasing along ``T``.
        path_logp: ``[N, S]`` float, masked diffusion LMs sampled with a trainable decoding policy: the summed
            log-probability, under the denoiser, of the tokens committed at each of the ``S`` decoding steps in the
            state they were decoded from (the pathwise log-likelihood per step, SAS [118]'s self-aware reward).
    """

    prefix_tree: PrefixTree | None = None
    step_std: Tensor | None = None
    segment_ids: Tensor | None = None
    truncated: Tensor | None = None
    step_rewards: Tensor | None = None
    action_ids: Tensor | None = None
    segment_values: Tensor | None = None
    answer_probe: Tensor | None = None
    teacher_logp: Tensor | None = None
    block_ids: Tensor | None = None
    path_logp: Tensor | None = None

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

    @staticmethod
    def cat(parts: list[RolloutStructure], sizes: list[int]) -> RolloutStructure:
        """The structure of rollouts joined along the sample axis (``sizes[i]`` samples in ``parts[i]``): a field set
        in any part must be set in every non-empty part; tensors are right-padded with zeros to the longest
        per-sample axis. A prefix tree does not join (its node ids are per
        rollout): raises ``ValueError``."""
        live = [(part, size) for part, size in zip(parts, sizes, strict=True) if size > 0]
        values: dict[str, Any] = {}
        for item in fields(RolloutStructure):
            present = [getattr(part, item.name) is not None for part, _ in live]
            if not any(present):
                values[item.name] = None
                continue
            if not all(present):
                raise ValueError(f"cannot join rollouts: only some carry the structure field {item.name!r}")
            tensors = [getattr(part, item.name) for part, _ in live]
            if not all(isinstance(t, Tensor) for t in tensors):
                raise ValueError(
                    f"cannot join rollouts that carry {item.name!r} (a prefix tree's node ids are per rollout); "
                    "tree rollouts do not combine with sample sources that add samples."
                )
            values[item.name] = pad_cat(tensors, side="right")
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


def pad_cat(tensors: list[Tensor], *, side: str = "right") -> Tensor:
    """Concatenate ``[n_i, L_i, ...]`` tensors along dim 0, zero-padding dim 1 to the longest ``L_i`` on ``side``
    (``"left"`` or ``"right"``); 1-d tensors are concatenated as they are. Trailing dims must agree."""
    if tensors[0].dim() < 2:
        return torch.cat(tensors, dim=0)
    width = max(t.shape[1] for t in tensors)
    padded = []
    for t in tensors:
        missing = width - t.shape[1]
        if missing:
            filler = t.new_zeros((t.shape[0], missing, *t.shape[2:]))
            t = torch.cat([filler, t] if side == "left" else [t, filler], dim=1)
        padded.append(t)
    return torch.cat(padded, dim=0)


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
