"""The options of turn-level tree rollouts (``policy.multi_turn.tree``; the mechanism: :mod:`genalign.policies.lm.
turn_trees`, Tree-GRPO [165]), importable without torch like the rest of the policy config."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class TurnTreeOptions:
    """``policy.multi_turn.tree``: training trajectories as the leaves of trees that branch at turn boundaries."""

    enabled: bool = field(default=False, metadata={"help": "Sample each training group as turn-level trees."})
    split_turns: list[int] = field(
        default_factory=lambda: [1],
        metadata={"help": "Turns (>= 1, increasing, < max_turns) before which every trajectory branches."},
    )
    branching: list[int] = field(
        default_factory=lambda: [2], metadata={"help": "Branches per split, one count >= 2 per split turn."}
    )
    trees_per_prompt: int = field(
        default=2, metadata={"help": "Trees per row (Tree-GRPO's inter-tree level needs >= 2)."}
    )

    @property
    def num_leaves(self) -> int:
        return math.prod(self.branching)

    @property
    def group_size(self) -> int:
        return self.trees_per_prompt * self.num_leaves

    def validate(self, *, max_turns: int | None = None) -> None:
        """Raise a ``ValueError`` naming the first bad field, its value and the fix (nothing when disabled); the check
        against ``policy.multi_turn.max_turns`` runs when it is given (the multi-turn options' own ``validate``)."""
        if not self.enabled:
            return
        turns = self.split_turns
        checks = [
            (
                bool(turns) and turns == sorted(set(turns)) and turns[0] >= 1,
                f"policy.multi_turn.tree.split_turns={turns} must be non-empty, strictly increasing and >= 1 (a split "
                "before turn 0 shares nothing), e.g. [1].",
            ),
            (
                not turns or max_turns is None or turns[-1] < max_turns,
                f"policy.multi_turn.tree.split_turns={turns} must be < policy.multi_turn.max_turns={max_turns}.",
            ),
            (
                len(self.branching) == len(turns) and all(k >= 2 for k in self.branching),
                f"policy.multi_turn.tree.branching={self.branching} needs one count >= 2 per split turn "
                f"({len(turns)}).",
            ),
            (
                self.trees_per_prompt >= 1,
                f"policy.multi_turn.tree.trees_per_prompt={self.trees_per_prompt} must be >= 1.",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


__all__ = ["TurnTreeOptions"]
