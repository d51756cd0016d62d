"""Tree rollouts of the flow policy: configuration, the plan of an iteration and the per-step credit of the leaves.

The sampler is :func:`genalign.pipelines.flow.denoise_tree` and the scorer is the flow policy's ordinary ``score``
(one sampler/scorer code path): a leaf is stored as a full trajectory with its SDE steps as actions, so the old
log-probs stay exact. This module holds what is specific to trees (BranchGRPO [170], TempFlow-GRPO [168], G2RPO-style
single split): which steps split, which depths are trained, and the per-depth advantages the trainer consumes through
the policy hook ``per_action_advantages(rollout, advantages [N]) -> [N, T]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from genalign.schedulers.branching import (
    NodeReward,
    TreePlan,
    leaf_step_advantages,
    node_rewards,
    per_depth_advantages,
    shifted_split_steps,
    width_pruning_mask,
)

TREE_PLAN_KEY = "tree_plan"  # Rollout.info key holding the TreePlan of a tree rollout


@dataclass
class TreeRolloutConfig:
    """Branch/tree rollouts (BranchGRPO [170]); ``group_size`` must equal ``branching ** len(split_steps)``."""

    enabled: bool = field(default=False, metadata={"help": "Sample each group as the leaves of one trajectory tree."})
    split_steps: list[int] = field(
        default_factory=lambda: [0, 3, 6, 9], metadata={"help": "Steps where every node splits (SDE); ODE elsewhere."}
    )
    branching: int = field(default=2, metadata={"help": "Children per split (k); leaves = k ** len(split_steps)."})
    sde_steps: list[int] = field(
        default_factory=list, metadata={"help": "Extra stochastic steps that do not split (one child each)."}
    )
    slide_every: int = field(
        default=0, metadata={"help": "Move the splits slide_stride steps later every this many iterations (0 = fixed)."}
    )
    slide_stride: int = field(default=1, metadata={"help": "Steps the splits move each time (BranchGRPO-Mix)."})
    slide_mode: Literal["clamp", "cycle"] = field(
        default="clamp", metadata={"help": "At the last step: stay there ('clamp') or start again at 0 ('cycle')."}
    )
    node_reward: NodeReward = field(
        default="mean", metadata={"help": "Internal-node reward: mean of leaves or probability_weighted mean."}
    )
    advantage: Literal["per_depth", "leaf"] = field(
        default="per_depth",
        metadata={"help": "per_depth: each split step gets its child's depth-normalised advantage; leaf: leaf's own."},
    )
    trained_depths: list[int] | None = field(
        default=None, metadata={"help": "Depth pruning: depths (1 = children of the first split) that get gradient."}
    )
    width_keep_fraction: float = field(
        default=1.0, metadata={"help": "Width pruning: fraction of leaves per tree (largest |advantage|) trained."}
    )
    train_sde_steps: bool = field(default=True, metadata={"help": "Also train the extra non-splitting SDE steps."})

    def validate(self, num_steps: int | None = None) -> None:
        if not self.enabled:
            return
        if self.branching < 2:
            raise ValueError(f"policy.tree.branching={self.branching} must be >= 2.")
        if not self.split_steps or self.split_steps != sorted(set(self.split_steps)) or min(self.split_steps) < 0:
            raise ValueError(f"policy.tree.split_steps={self.split_steps} must be non-empty, sorted, distinct, >= 0.")
        if num_steps is not None and max(self.split_steps + self.sde_steps) >= num_steps:
            raise ValueError(
                f"policy.tree.split_steps={self.split_steps} / sde_steps={self.sde_steps} must be < "
                f"policy.num_steps={num_steps}."
            )
        if self.slide_every < 0 or self.slide_stride < 1:
            raise ValueError(
                f"policy.tree.slide_every={self.slide_every} must be >= 0 and slide_stride={self.slide_stride} >= 1."
            )
        depth = len(self.split_steps)
        if self.trained_depths is not None and (
            not self.trained_depths or any(not 1 <= d <= depth for d in self.trained_depths)
        ):
            raise ValueError(
                f"policy.tree.trained_depths={self.trained_depths} must be a non-empty subset of 1..{depth}."
            )
        if not 0 < self.width_keep_fraction <= 1:
            raise ValueError(f"policy.tree.width_keep_fraction={self.width_keep_fraction} must be in (0, 1].")

    @property
    def num_leaves(self) -> int:
        return self.branching ** len(self.split_steps)


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


def tree_step_advantages(
    config: TreeRolloutConfig, plan: TreePlan, leaf_values: Tensor, leaf_step_logp: Tensor | None = None
) -> Tensor:
    """Per-step advantages ``[N, S]`` of the ``N = B L`` leaves of ``B`` trees (leaves of a tree contiguous).

    ``leaf_values`` ``[N]`` are the leaf rewards or any per-group affine map of them with a positive slope (the
    trainer's GRPO / Dr.GRPO advantages): node means and per-depth normalisation are invariant to such maps, so the
    per-depth advantages computed from the trainer's leaf advantages equal those computed from the raw rewards (up to
    the ``eps`` of the normalisation). ``advantage="leaf"`` broadcasts each leaf's value to its steps. Width pruning
    zeroes the advantages of the leaves outside the kept fraction.
    """
    leaves = plan.num_leaves
    if leaf_values.dim() != 1 or leaf_values.shape[0] % leaves:
        raise ValueError(
            f"tree advantages need one value per leaf, a multiple of {leaves}; got shape {tuple(leaf_values.shape)}."
        )
    values = leaf_values.float().view(-1, leaves)  # [B, L]
    if config.advantage == "leaf":
        steps = values[:, :, None].expand(-1, -1, plan.num_steps)  # [B, L, S]
    else:
        logp = None if leaf_step_logp is None else leaf_step_logp.float().view(-1, leaves, plan.num_steps)
        by_depth = node_rewards(plan, values, weighting=config.node_reward, leaf_step_logp=logp)
        steps = leaf_step_advantages(plan, per_depth_advantages(by_depth))  # [B, L, S]
    if config.width_keep_fraction < 1:
        keep = width_pruning_mask(values, keep_fraction=config.width_keep_fraction)  # [B, L]
        steps = steps * keep[:, :, None].to(steps.dtype)
    return steps.reshape(-1, plan.num_steps)  # [N, S]
