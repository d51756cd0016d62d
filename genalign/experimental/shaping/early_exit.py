"""Reward shapers for concise reasoning, read with the early-exit sample sources of
:mod:`genalign.experimental.sampling.exits`: S-GRPO's decaying reward over a serial group [14] and Step-GRPO's
step-aware relative reward [114]. A sample is *correct* when its combined reward reaches ``threshold``; a missing
(NaN) reward stays missing.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import make_groups
from genalign.algorithms._validation import check_float_tensor
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.reward_shaping.base import REWARD_SHAPERS
from genalign.algorithms.signals import declare_signal

EXIT_ORDER = "exit_order"
declare_signal(EXIT_ORDER, ("N",), "source",
               "Where the sample exits its serial group's reasoning path: 0 for the earliest exit, up to the full path "
               "(the last); -1 outside a serial group.", source="[14] S-GRPO", dtype="integer")  # fmt: skip


def rank_in_group(flags: Tensor, order: Tensor, group_ids: Tensor) -> Tensor:
    """``[N]`` long: for each sample, how many flagged samples of its group (itself included) have an ``order`` at or
    before its own; ``flags`` ``[N]`` bool, ``order`` ``[N]`` long (distinct within a group), ``group_ids`` ``[N]``."""
    groups = make_groups(group_ids, flags.shape[0], min_size=1)
    span = int(order.max()) - int(order.min()) + 1 if order.numel() else 1
    perm = torch.argsort(groups.index * span + (order - order.min()), stable=True)  # by group, then by order
    counted = flags[perm].long()  # [N]
    running = counted.cumsum(0)  # [N] flagged so far, over the groups in order
    group_of = groups.index[perm]  # [N]
    start = torch.full((groups.num_groups,), running.numel(), dtype=torch.long, device=flags.device)
    start = start.scatter_reduce(0, group_of, running - counted, reduce="amin")  # [G] flagged before each group
    rank = torch.empty_like(running)
    rank[perm] = running - start[group_of]
    return rank


@REWARD_SHAPERS.register(
    "exit_decay",
    needs=(EXIT_ORDER,),
    formula="members of a serial group in exit order; a correct member (r_i ≥ threshold) that is the k-th correct one "
    "from the earliest exit gets r̃_i = r_i·decay^{k−1}; other samples keep r_i",
    source="[14] S-GRPO (with the sample source serial_exits)",
    summary="Decaying rewards over a serial group: the earliest correct exit keeps its reward, each later correct "
    "exit gets half as much (decay 0.5), so the model learns to stop thinking once its answer is right.",
)
def exit_decay(rewards: Tensor, batch: StepBatch, *, decay: float = 0.5, threshold: float = 0.5) -> tuple[Tensor, dict]:
    """S-GRPO's decaying reward [14]: along one reasoning path's exits (``exit_order``, from the sample source
    ``serial_exits``), correct answers earn less the later they exit. With 0/1 rewards this is the paper's
    ``r = 1/2^{N_right − 1}`` for a correct answer, ``N_right`` the correct answers at or before its exit, and 0 for a
    wrong one; a graded reward is scaled by the same factor. Samples outside a serial group (``exit_order = −1``) keep
    their reward.

    Reading chosen: the abstract says only that rewards of correct answers "gradually decrease" with the exit
    position; genalign halves them per later correct exit (``decay``, the paper's 1/2) and scales a graded reward by
    the same factor. The advantage estimator is left to the config (the paper subtracts the group mean).

    Args:
        rewards: ``[N]`` combined rewards.
        batch: reads ``exit_order`` ``[N]`` and ``group_ids``.
        decay: the factor in (0, 1] between consecutive correct exits (0.5 in the paper).
        threshold: a sample is correct when its reward reaches it.
    Returns:
        ``(r̃ [N], {"reward_shaping/exit_decay_factor_mean": mean factor over correct members})``.
    """
    if not 0.0 < decay <= 1.0:
        raise ValueError(f"exit_decay: decay = {decay!r} must be in (0, 1] (0.5 halves each later correct exit)")
    rewards = check_float_tensor(rewards, "rewards", "[N]")
    order = batch.require(EXIT_ORDER, "reward shaper 'exit_decay'").to(rewards.device).long()  # [N]
    correct = (order >= 0) & ~rewards.isnan() & (rewards >= threshold)  # [N]
    rank = rank_in_group(correct, order, batch.group_ids.to(rewards.device))  # [N]
    factor = torch.where(correct, decay ** (rank - 1).clamp_min(0).to(rewards.dtype), 1.0)  # [N]
    mean = float(factor[correct].mean()) if bool(correct.any()) else float("nan")
    return rewards * factor, {"reward_shaping/exit_decay_factor_mean": mean}


def steps_per_sample(segment_ids: Tensor, mask: Tensor) -> Tensor:
    """``[N]`` float: the reasoning steps (segments) each sample's actions span; ``segment_ids``, ``mask`` ``[N, T]``."""
    valid = mask > 0  # [N, T]
    last = torch.where(valid, segment_ids.long(), -1).max(dim=1).values  # [N] the last action's segment
    return (last + 1).double()  # [N] 0 without actions


@REWARD_SHAPERS.register(
    "step_redundancy",
    needs=("segment_ids",),
    formula="s_i = reasoning steps of sample i (segments); b = mean s over the group's correct samples; correct i: "
    "r̃_i = r_i − penalty·clip(s_i/b − 1, 0, 1); others keep r_i",
    source="[114] Step-GRPO (step-aware relative reward; with the sample source dynamic_truncation)",
    summary="Step-aware relative reward: a correct answer that takes more reasoning steps than the group's correct "
    "answers take on average loses up to `penalty` of its reward.",
)
def step_redundancy(
    rewards: Tensor, batch: StepBatch, *, penalty: float = 0.5, threshold: float = 0.5
) -> tuple[Tensor, dict]:
    """Step-GRPO's step-aware relative reward [114]: redundancy measured in reasoning steps against the group.

    Reading chosen: the abstract says the reward "dynamically penalizes redundancy based on group-level baselines";
    genalign counts the steps of each completion (its segments: newlines and sentence ends, and a new step at each of
    ``policy.probes.step_markers``, the abstract's linguistic markers such as "Wait"), takes as baseline ``b``
    the mean step count of the group's correct samples, and subtracts ``penalty·clip(s/b − 1, 0, 1)`` from a correct
    sample with ``s`` steps: nothing at or below the baseline, the whole ``penalty`` at twice the baseline or more.
    Wrong samples and groups without a correct sample are unchanged.

    Args:
        rewards: ``[N]`` combined rewards.
        batch: reads ``segment_ids`` ``[N, T]``, ``mask`` and ``group_ids``.
        penalty: the most reward a redundant correct sample loses (>= 0).
        threshold: a sample is correct when its reward reaches it.
    Returns:
        ``(r̃ [N], {"reward_shaping/step_redundancy_penalty_mean": mean penalty over correct samples})``.
    """
    if not penalty >= 0.0:
        raise ValueError(f"step_redundancy: penalty = {penalty!r} must be >= 0 (the largest reward a sample loses)")
    rewards = check_float_tensor(rewards, "rewards", "[N]")
    segment_ids = batch.require("segment_ids", "reward shaper 'step_redundancy'").to(rewards.device)  # [N, T]
    steps = steps_per_sample(segment_ids, batch.mask.to(rewards.device))  # [N]
    correct = ~rewards.isnan() & (rewards >= threshold)  # [N]
    groups = make_groups(batch.group_ids.to(rewards.device), rewards.shape[0], min_size=1)
    total = steps.new_zeros(groups.num_groups).index_add_(0, groups.index, torch.where(correct, steps, 0.0))  # [G]
    count = steps.new_zeros(groups.num_groups).index_add_(0, groups.index, correct.double())  # [G]
    baseline = (total / count.clamp_min(1.0))[groups.index]  # [N]
    excess = (steps / baseline.clamp_min(1.0) - 1.0).clamp(0.0, 1.0)  # [N]
    cut = torch.where(correct, penalty * excess, 0.0).to(rewards.dtype)  # [N]
    mean = float(cut[correct].mean()) if bool(correct.any()) else float("nan")
    return rewards - cut, {"reward_shaping/step_redundancy_penalty_mean": mean}
