"""Tree rollouts of multi-turn episodes that branch at turn boundaries (``policy.multi_turn.tree``, its options in
:mod:`genalign.policies.lm.turn_tree_options`; Tree-GRPO [165],
"each tree node represents the complete agent interaction step").

A training group of ``group_size = trees_per_prompt × prod(branching)`` trajectories per row starts as
``trees_per_prompt`` roots. Before a trajectory samples turn ``split_turns[d]`` (so after the environment's answer to
the turn before it), it is replaced by ``branching[d]`` branches: the trajectory itself and copies of it that share
its tokens exactly (prompt, turns, answers: the prefix), each with an environment in the same state
(:func:`~genalign.environments.branching.fork_episode`: restored from the state, or the turns replayed) and, in the
static engine, a copy of its held KV cache rows (:meth:`~genalign.policies.lm.engines.turn_cache.TurnCaches.fork`:
the prefix is not encoded again). The branches then sample independently. A trajectory that ended before a split is
copied as it is (identical leaves, as a token tree node that ends before its split). Evaluation rollouts stay
independent trajectories.

The sampling tree is declared as the rollout's ``prefix_tree`` (a node per turn-level tree node, depth = splits
above it), so the tree credit rules read it unchanged: ``tree_grpo`` [165] sums the intra-tree advantage (a leaf among
the leaves of its own tree: a step-level preference between sibling branches) and the inter-tree one (the group).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from genalign.algorithms.structure import PrefixTree
from genalign.environments.branching import fork_episode
from genalign.policies.lm.turn_tree_options import TurnTreeOptions


@dataclass
class TreeNodes:
    """The node ids of one rollout's turn trees: roots first, then every branch a fresh id."""

    next_id: int = 0

    def new(self) -> int:
        self.next_id += 1
        return self.next_id - 1


def turn_prefix_tree(paths: list[list[tuple[int, int, int]]], width: int) -> PrefixTree:
    """The sampling tree of ``N`` trajectories from their paths: ``paths[i]`` lists ``(first position, node, depth)``
    of each node trajectory ``i`` entered, in order (positions index its completion); positions from one node's first
    to the next one's belong to it, and padding after the last token keeps the last node.

    Returns:
        :class:`PrefixTree` with ``node_of_action`` and ``depth`` ``[N, width]`` long.
    """
    node = torch.zeros(len(paths), width, dtype=torch.long)  # [N, C]
    depth = torch.zeros(len(paths), width, dtype=torch.long)  # [N, C]
    for i, path in enumerate(paths):
        for start, node_id, level in path:
            node[i, min(start, width) :] = node_id
            depth[i, min(start, width) :] = level
    return PrefixTree(node_of_action=node, depth=depth)


class TurnTree:
    """The branching of one training rollout's trajectories (module docstring).

    Args:
        options: the tree's shape.
        fork: ``fork(trajectory, number) -> copy``: a copy of an active trajectory, numbered ``number``, with its
            own environment in the same state (the rollout counts a failure and ends the copy).
        share_caches: ``share_caches(parents, children)``: the family's held caches of ``parents[i]`` copied to
            ``children[i]`` (their numbers).
    """

    def __init__(
        self, options: TurnTreeOptions, fork: Callable[[Any, int], Any], share_caches: Callable[[list, list], None]
    ) -> None:
        self.options, self.fork, self.share_caches = options, fork, share_caches
        self.nodes = TreeNodes()

    def plant(self, trajectories: list[Any]) -> None:
        """Give every root trajectory its root node."""
        for trajectory in trajectories:
            trajectory.path = [(0, self.nodes.new(), 0)]

    def _due(self, trajectory: Any) -> int:
        """The branches ``trajectory`` splits into now (1: none): its next split is before the turn it samples."""
        depth = len(trajectory.path) - 1
        if depth < len(self.options.split_turns) and trajectory.turn >= self.options.split_turns[depth]:
            return self.options.branching[depth]
        return 1

    def branch(self, trajectories: list[Any], numbers: Iterator[int]) -> list[Any]:
        """``trajectories`` with every active trajectory due to split replaced by itself and its copies (numbered from
        ``numbers``), each entering a new node; the held caches of the copies are the parent's."""
        out, parents, children = [], [], []
        for trajectory in trajectories:
            count = 1 if trajectory.done else self._due(trajectory)
            out.append(trajectory)
            if count == 1:
                continue
            copies = [self.fork(trajectory, next(numbers)) for _ in range(count - 1)]
            parents.append(trajectory.number)
            children.append([copy.number for copy in copies])
            for member in (trajectory, *copies):
                member.path = [*member.path, (len(member.ids), self.nodes.new(), len(member.path))]
            out += copies
        if parents:
            self.share_caches(parents, children)
        return out

    def complete(self, trajectories: list[Any], copy: Callable[[Any], Any]) -> list[Any]:
        """``trajectories`` (all finished) with every one that ended before a split followed by its identical
        ``copy`` copies, so each row keeps ``group_size`` leaves."""
        out = []
        for trajectory in trajectories:
            members = [trajectory]
            for depth in range(len(trajectory.path) - 1, len(self.options.split_turns)):
                members = [
                    member
                    for m in members
                    for member in (m, *(copy(m) for _ in range(self.options.branching[depth] - 1)))
                ]
            out += members
        return out


def turn_tree(policy: Any, family: Any, group_size: int, mode: str, counts: Counter) -> TurnTree | None:
    """The turn-level trees of a training rollout (``mode``) of ``policy`` with ``policy.multi_turn.tree`` (None
    otherwise); ``family`` is the rollout's :class:`~genalign.policies.lm.multi_turn.TurnFamily` (its ``fork``)."""
    options = policy.config.multi_turn.tree
    if not options.enabled or mode != "train":
        return None
    if group_size != options.group_size:
        raise ValueError(
            f"algorithm.group_size={group_size} must equal policy.multi_turn.tree.trees_per_prompt × "
            f"prod(policy.multi_turn.tree.branching) = {options.group_size} with turn-level trees; change one."
        )
    return TurnTree(options, lambda t, number: branch_copy(policy, t, number, counts), family.fork)


def branch_copy(policy: Any, trajectory: Any, number: int, counts: Counter) -> Any:
    """A copy of an active trajectory with its own environment in the same state (a failure to make one is counted
    as ``environment_errors/fork`` and ends the copy, truncated)."""
    copy = trajectory.copy(number)
    counts["tree_branches"] += 1
    if trajectory.episode is None:
        return copy
    try:
        copy.episode = fork_episode(policy.environments, trajectory.source, trajectory.episode, trajectory.model_turns)
    except Exception as err:  # any failure of environment code: counted, never stops the run
        counts["environment_errors/fork"] += 1
        policy.environment_failures.append(f"fork: {type(err).__name__}: {err}")
        copy.episode, copy.failed = None, True
        copy.end(truncated=True)
    return copy


def finished_copy(trajectory: Any, number: int, counts: Counter) -> Any:
    """An identical leaf of a trajectory that ended before a split (its reward read, no environment)."""
    copy = trajectory.copy(number)
    copy.episode = None
    counts["trajectories"] += 1
    counts["trajectories_truncated"] += int(copy.truncated)
    return copy


__all__ = ["TreeNodes", "TurnTree", "branch_copy", "finished_copy", "turn_prefix_tree", "turn_tree"]
