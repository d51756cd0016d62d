"""Shared-prefix tree rollouts of the causal-LM family (``policy.tree``): the options, and one training rollout.

A group of ``group_size = trees_per_prompt × prod(branching)`` completions per prompt is sampled as the leaves of
``trees_per_prompt`` trees by :class:`~genalign.policies.lm.engines.tree.TreeCacheEngine` (static KV cache, prefix computed once
and copied to the branches). Leaves are stored and scored like independent completions (exact old log-probs); the
sampling tree is declared as the rollout's ``prefix_tree`` structure, from which credit rules compute node values as
means of descendant outcomes: ``tree_grpo`` [165], ``grpo_ma`` [173], ``spo_tree`` [41], ``tree_td`` [255],
``tree`` [170]. Evaluation rollouts stay independent samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from genalign.policies.lm.engines.base import SamplingParams
from genalign.policies.lm.engines.tree import LMTreePlan, TreeCacheEngine, TreeGeneration


@dataclass
class LMTreeConfig:
    """Tree rollouts of a causal LM (``policy.tree``); ``algorithm.group_size`` must equal
    ``trees_per_prompt * prod(branching)``."""

    enabled: bool = field(default=False, metadata={"help": "Sample each group as the leaves of shared-prefix trees."})
    split_positions: list[int] = field(
        default_factory=lambda: [8, 16, 24, 32],
        metadata={"help": "Completion positions (>= 1, increasing) where every node splits; earliest in entropy mode."},
    )
    branching: list[int] = field(
        default_factory=lambda: [2, 2, 2, 2],
        metadata={"help": "Children per split, one count >= 2 per split position; leaves = their product."},
    )
    trees_per_prompt: int = field(
        default=1, metadata={"help": "Trees per prompt (Tree-GRPO's inter-tree level needs >= 2)."}
    )
    entropy_threshold: float | None = field(
        default=None,
        metadata={
            "help": "Split at the first token from the split position on with entropy >= this (nats); null = fixed."
        },
    )
    entropy_window: int = field(
        default=8,
        metadata={"help": "Entropy and segment modes: split at the latest this many tokens after the split position."},
    )
    at_segment_boundaries: bool = field(
        default=False,
        metadata={
            "help": "Split at the first token from the split position on that starts a new segment (after a newline "
            "or a sentence end: a new reasoning step)."
        },
    )

    @property
    def num_leaves(self) -> int:
        return math.prod(self.branching)

    @property
    def group_size(self) -> int:
        return self.trees_per_prompt * self.num_leaves

    def plan(self, boundary_table: Tensor | None = None) -> LMTreePlan:
        """The engine's plan; ``boundary_table`` ``[V]`` bool (the tokenizer's segment boundaries) is used in segment
        mode."""
        return LMTreePlan(
            split_positions=tuple(self.split_positions),
            branching=tuple(self.branching),
            entropy_threshold=self.entropy_threshold,
            entropy_window=self.entropy_window,
            boundary_table=boundary_table if self.at_segment_boundaries else None,
        )

    def validate(self, *, max_new_tokens: int | None = None, engine: str | None = None) -> None:
        """Raise a ``ValueError`` naming the first bad option, its value and the fix (nothing when disabled); the
        checks against ``policy.max_new_tokens`` and ``policy.engine`` run when they are given (the policy config's
        own ``validate`` gives them)."""
        if not self.enabled:
            return
        positions = self.split_positions
        checks: list[tuple[bool, str]] = [
            (
                engine in (None, "static"),
                f"policy.tree.enabled=true needs policy.engine='static', got {engine!r}; set it.",
            ),
            (
                bool(positions) and positions == sorted(set(positions)) and positions[0] >= 1,
                f"policy.tree.split_positions={positions} must be non-empty, strictly increasing and >= 1 (a split "
                "at 0 shares no token), e.g. [8, 16, 24, 32].",
            ),
            (
                not positions or max_new_tokens is None or positions[-1] < max_new_tokens,
                f"policy.tree.split_positions={positions} must be < policy.max_new_tokens={max_new_tokens}; lower "
                "them or raise max_new_tokens.",
            ),
            (
                len(self.branching) == len(positions) and all(k >= 2 for k in self.branching),
                f"policy.tree.branching={self.branching} needs one count >= 2 per split position ({len(positions)}).",
            ),
            (self.trees_per_prompt >= 1, f"policy.tree.trees_per_prompt={self.trees_per_prompt} must be >= 1."),
            (
                self.entropy_threshold is None or self.entropy_threshold > 0,
                f"policy.tree.entropy_threshold={self.entropy_threshold} must be > 0 (e.g. 1.0) or null.",
            ),
            (self.entropy_window >= 0, f"policy.tree.entropy_window={self.entropy_window} must be >= 0 (e.g. 8)."),
            (
                not (self.at_segment_boundaries and self.entropy_threshold is not None),
                "policy.tree.at_segment_boundaries=true with policy.tree.entropy_threshold set: split at high entropy "
                "or at segment boundaries; unset one.",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


def sample_tree_group(
    engine: TreeCacheEngine,
    config: LMTreeConfig,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    *,
    group_size: int,
    params: SamplingParams,
    generator: torch.Generator,
    boundary_table: Tensor | None = None,
) -> TreeGeneration:
    """The ``group_size`` leaves of each prompt of ``prompt_ids`` ``[B, P]`` (left-padded), ``B × group_size`` rows in
    prompt order, from ``trees_per_prompt`` trees per prompt; ``boundary_table`` ``[V]`` bool: the segment-boundary
    tokens (segment mode)."""
    if group_size != config.group_size:
        raise ValueError(
            f"algorithm.group_size={group_size} must equal policy.tree.trees_per_prompt × prod(policy.tree.branching) "
            f"= {config.trees_per_prompt} × {config.num_leaves} = {config.group_size} with tree rollouts; change one."
        )
    roots = prompt_ids.repeat_interleave(config.trees_per_prompt, dim=0)  # [B M, P]
    root_mask = prompt_mask.repeat_interleave(config.trees_per_prompt, dim=0)  # [B M, P]
    return engine.generate_tree(roots, root_mask, params, generator, config.plan(boundary_table))


__all__ = ["LMTreeConfig", "sample_tree_group"]
