"""Shared-prefix tree rollouts of the causal-LM family (``policy.tree``): the options, and one training rollout.

A group of ``group_size = trees_per_prompt × prod(branching)`` completions per prompt is sampled as the leaves of
``trees_per_prompt`` trees by :class:`~genalign.policies.lm.engines.tree.TreeCacheEngine` (static KV cache, prefix computed once
and copied to the branches). Leaves are stored and scored like independent completions (exact old log-probs); the
sampling tree is declared as the rollout's ``prefix_tree`` structure, from which credit rules compute node values as
means of descendant outcomes: ``tree_grpo`` [165], ``grpo_ma`` [173], ``spo_tree`` [41], ``tree_td`` [255],
``tree`` [170]. Evaluation rollouts stay independent samples.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.policies.lm.engines.base import SamplingParams
from genalign.policies.lm.engines.tree import TreeCacheEngine, TreeGeneration
from genalign.policies.lm.options import LMTreeConfig


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
