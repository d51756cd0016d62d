"""Outcome-reward shaping at the action level: an intrinsic reward for all-correct groups (Miner [28]) and the
positive / negative rebalancing of OREAL [147] (rules of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`).

Both read which samples are correct from the trainer's reward table (the batch's ``rewards``, one column per
configured reward function, in config order): a sample is correct when its reward in ``success_column`` exceeds
``success_threshold`` (a missing reward is not correct). Batch statistics are taken over the rollout batch of the
process, once, before it is split into micro-batches.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import group_sum, make_groups
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


def success_mask(batch: StepBatch, column: int, threshold: float, rule: str) -> tuple[Tensor, Tensor]:
    """``(correct [N] bool, present [N] bool)`` from reward column ``column``."""
    rewards = batch.require("rewards", rule)  # [N, K]
    if not -rewards.shape[1] <= column < rewards.shape[1]:
        raise ValueError(
            f"{rule}: success_column={column} is not a reward column; the config has {rewards.shape[1]} reward(s)"
        )
    value = rewards[:, column]  # [N]
    present = ~torch.isnan(value)
    return present & (value > threshold), present


def _all_correct_groups(correct: Tensor, present: Tensor, group_ids: Tensor) -> Tensor:
    """``[N]`` bool: the sample's group has at least 2 rewards and every present one is correct."""
    groups = make_groups(group_ids, correct.shape[0])
    counts = group_sum(torch.stack([correct, present], 1).double(), groups)  # [G, 2]
    homogeneous = (counts[:, 0] == counts[:, 1]) & (counts[:, 1] >= 2)  # [G]
    return homogeneous[groups.index] & present  # [N]


@CREDIT_RULES.register(
    "intrinsic_mastery",
    needs=("rewards", "behaviour_logp"),
    formula="all-correct groups: ℓ_i = mean_t logπ_old(o_it), a_i = max(0, mean_G ℓ − ℓ_i), A_it = s·a_i·(1 − p_it)^γ; "
    "s = min(1, c·Σ|A_other| / Σ|a·(1 − p)^γ|) over valid actions; other groups keep their advantages",
    source="[28] Miner (official recipe: focal credit γ = 2, calibration c = 0.0015, incorrect_scale 0)",
    summary="Intrinsic reward on all-correct groups: less confident correct responses are reinforced, with focal "
    "token credit, calibrated to a fraction of the verifiable advantages.",
)
def intrinsic_mastery(
    advantages: Tensor,
    batch: StepBatch,
    *,
    gamma: float = 2.0,
    calibration: float = 0.0015,
    success_column: int = 0,
    success_threshold: float = 0.0,
) -> Tensor:
    """Miner [28]: positive homogeneous groups (every rollout correct) have zero advantage under any group baseline;
    Miner mines them with the policy's own uncertainty as a self-supervised reward.

    For a sample of such a group, ``ℓ_i`` is its mean token log-probability under the behaviour policy and its
    intrinsic advantage ``a_i = max(0, mean_G ℓ − ℓ_i)``: correct responses the policy was *less* sure of are
    reinforced, confident ones are not penalised. *Focal credit* spreads ``a_i`` over the tokens as
    ``a_i·(1 − p_it)^γ``, amplifying uncertain tokens and suppressing confident ones. *Adaptive calibration* scales
    all intrinsic advantages by ``s = min(1, c·M_verifiable / M_intrinsic)``, ``M`` the summed ``|A|`` over valid
    actions (``M_verifiable`` over the samples outside all-correct groups), so the intrinsic signal never exceeds a
    fraction ``c`` of the verifiable one (no verifiable signal: ``s = 0``; ``calibration = 0`` turns the scaling
    off). Groups with mixed (or all-wrong) rewards keep their incoming advantages (the recipe's ``incorrect_scale``
    is 0).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``rewards`` ``[N, K]``, ``group_ids``, ``mask`` and ``behaviour_logp`` ``[N, T]``.
        gamma: focal exponent ``γ >= 0`` (0 = uniform credit).
        calibration: ``c >= 0`` (the recipe's ``scale_by_normal``).
        success_column: reward column that says whether a response is correct.
        success_threshold: a response is correct when that reward exceeds it.
    Returns:
        ``[N, T]`` per-action advantages.
    """
    if not (gamma >= 0 and calibration >= 0):
        raise ValueError(f"gamma and calibration must be >= 0, got {gamma!r}, {calibration!r}")
    correct, present = success_mask(batch, success_column, success_threshold, "intrinsic_mastery")
    mastered = _all_correct_groups(correct, present, batch.group_ids)  # [N]
    device = advantages.device
    logp = batch.require("behaviour_logp", "intrinsic_mastery").detach().to(device, advantages.dtype)  # [N, T]
    valid = batch.mask.to(device) > 0  # [N, T]
    mastered = mastered.to(device) & valid.any(1)
    mean_logp = torch.where(valid, logp, 0.0).sum(1) / valid.sum(1).clamp_min(1)  # [N] ℓ_i
    groups = make_groups(batch.group_ids.to(device), mastered.shape[0])
    members = mastered.to(logp.dtype)[:, None]  # [N, 1]
    group_mean = group_sum(mean_logp[:, None] * members, groups) / group_sum(members, groups).clamp_min(1)  # [G, 1]
    intrinsic = torch.where(mastered, (group_mean[groups.index, 0] - mean_logp).clamp_min(0.0), 0.0)  # [N] a_i
    focal = (1.0 - torch.where(valid, logp, 0.0).exp()).clamp_min(0.0).pow(gamma)  # [N, T]
    credit = torch.where(valid, intrinsic[:, None] * focal, 0.0)  # [N, T]
    if calibration > 0:
        verifiable = torch.where(valid & ~mastered[:, None], advantages, 0.0).abs().sum()
        total = credit.abs().sum()
        scale = (calibration * verifiable / total).clamp_max(1.0) if total > 0 else total.new_ones(())
        credit = credit * scale
    return torch.where(mastered[:, None], credit, advantages)  # [N, T]
