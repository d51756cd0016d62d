"""Tree rollouts of the flow policy: the plan of an iteration, its trained steps and the prefix tree of the leaves.

The sampler is :func:`genalign.pipelines.flow_tree.denoise_tree`; a leaf is stored and scored like an independent
trajectory (its SDE steps are its actions), so the old log-probs stay exact. The leaves' shared prefixes are declared
to the backend as a :class:`~genalign.algorithms.structure.PrefixTree`, from which the credit rule ``tree`` computes
BranchGRPO's per-depth advantages [170].
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.structure import PrefixTree, tree_from_levels
from genalign.policies.flow.config import TreeRolloutConfig
from genalign.schedulers.branching import TreePlan, shifted_split_steps


def plan_for_iteration(config: TreeRolloutConfig, *, num_steps: int, iteration: int) -> TreePlan:
    """The tree of training ``iteration``: the configured splits, moved by the sliding schedule when enabled."""
    shift = 0
    if config.slide_every > 0:
        shift = config.slide_stride * (iteration // config.slide_every)
        if config.slide_mode == "cycle":
            shift %= num_steps - max(config.split_steps)
    splits = shifted_split_steps(config.split_steps, num_steps=num_steps, shift=shift)
    sde = tuple(s for s in config.sde_steps if s not in splits)
    return TreePlan(num_steps=num_steps, split_steps=splits, branching=config.branching, sde_steps=sde)


def trained_steps(config: TreeRolloutConfig, plan: TreePlan) -> Tensor:
    """``[S]`` bool: split steps of the trained depths (all by default) and, when asked, the extra SDE steps."""
    mask = torch.zeros(plan.num_steps, dtype=torch.bool)
    depths = config.trained_depths or list(range(1, plan.depth + 1))
    for depth in depths:
        mask[plan.split_steps[depth - 1]] = True
    if config.train_sde_steps and plan.sde_steps:
        mask[list(plan.sde_steps)] = True
    return mask


def prefix_tree(plan: TreePlan, num_trees: int) -> PrefixTree:
    """The :class:`PrefixTree` of ``num_trees`` trees of ``plan``: step ``s`` of a leaf leads into its ancestor
    holding state ``s + 1`` (the child a split creates, or the current node for other steps)."""
    nodes = [plan.node_of_leaf(step + 1) for step in range(plan.num_steps)]  # [S] x [L]
    return tree_from_levels(nodes, plan.depth_after_step(), num_trees=num_trees)
