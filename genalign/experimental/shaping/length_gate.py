"""GRPO-λ [291]: a per-group switch between the configured (length-penalised) reward and a length-agnostic 0/1
correctness reward, decided by the group's correctness ratio (a reward shaper of :data:`REWARD_SHAPERS`)."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms._groups import group_sum, make_groups
from genalign.algorithms._validation import check_float_tensor
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.reward_shaping.base import REWARD_SHAPERS


def correct_samples(batch: StepBatch, option: str, *, column: int, threshold: float) -> Tensor:
    """``[N]`` bool: raw reward column ``column`` is present and above ``threshold`` (shared by the shapers that
    read a verifier's correctness from the reward table)."""
    table = batch.require("rewards", f"reward shaper {option!r}")  # [N, K]
    if not -table.shape[1] <= column < table.shape[1]:
        raise ValueError(f"{option}: success_column={column} is not one of the {table.shape[1]} rewards (0-based); "
                         "give the position of the correctness reward in the config's rewards list.")  # fmt: skip
    values = table[:, column]  # [N]
    return ~torch.isnan(values) & (values > threshold)


def selected_groups(ratio: Tensor, *, selection: str, level: float) -> Tensor:
    """``[G]`` bool: the groups that keep the length-penalised reward. ``threshold``: correctness ratio ``>= level``;
    ``top_fraction``: the ``⌈level·G⌉`` groups with the highest ratio (ties broken by group order), ``ratio`` ``[G]``."""
    if selection == "threshold":
        return ratio >= level
    count = math.ceil(level * ratio.shape[0] - 1e-9)
    order = torch.sort(-ratio, stable=True).indices  # highest ratio first, earlier groups first among ties
    keep = torch.zeros_like(ratio, dtype=torch.bool)
    keep[order[:count]] = True
    return keep


@REWARD_SHAPERS.register(
    "correctness_gated_length",
    needs=("rewards",),
    formula="p_G = share of the group's samples with r_{i,c} > θ (c = success_column); kept groups (p_G ≥ λ, or the "
    "⌈λ·G⌉ groups of the batch with the highest p_G): r̃_i = r_i (the combined, length-penalised reward); other "
    "groups: r̃_i = 1[r_{i,c} > θ]",
    source="[291] GRPO-λ",
    summary="Keep the length-penalised reward only in groups that answer mostly correctly; groups with a low "
    "correctness ratio fall back to the length-agnostic 0/1 reward, so the length penalty never starves hard prompts.",
)
def correctness_gated_length(
    rewards: Tensor,
    batch: StepBatch,
    *,
    level: float = 0.5,
    selection: Literal["threshold", "top_fraction"] = "threshold",
    success_column: int = 0,
    success_threshold: float = 0.5,
) -> tuple[Tensor, dict[str, float]]:
    """GRPO-λ [291]: length penalties shorten correct chains of thought but, applied everywhere, make accuracy collapse
    early in training. GRPO-λ monitors the correctness ratio of each query's group: a group that is mostly correct
    keeps the length-penalised reward (efficiency), a group with a low ratio gets the plain 0/1 correctness reward
    (capability first).

    The length-penalised reward is the combined reward the shaper receives (e.g. ``exact_match`` plus a
    ``length_penalty`` reward in the config); the 0/1 reward is whether raw reward column ``success_column`` exceeds
    ``success_threshold``. Reading chosen: the abstract gives the switch by "correctness ratio" without the rule;
    ``selection="threshold"`` keeps the length penalty where the ratio is at least ``level`` (default 0.5),
    ``selection="top_fraction"`` keeps it for the ``⌈level·G⌉`` groups of the batch with the highest ratio (the
    batch-relative form of the method's λ). A missing (NaN) reward stays missing.

    Args:
        rewards: ``[N]`` combined rewards.
        batch: reads ``rewards`` ``[N, K]`` (the raw table) and ``group_ids``.
        level: ``λ`` in ``[0, 1]``: the correctness ratio (threshold) or the fraction of groups (top_fraction).
        selection: ``"threshold"`` or ``"top_fraction"``.
        success_column: the raw reward column of the verifier (correctness).
        success_threshold: a sample is correct when that reward exceeds it.
    Returns:
        ``(r̃ [N], {"reward_shaping/length_penalty_group_frac"})``: the share of groups that kept the penalty.
    """
    if selection not in ("threshold", "top_fraction"):
        raise ValueError(f"correctness_gated_length: selection={selection!r}; use 'threshold' or 'top_fraction'.")
    if not 0.0 <= level <= 1.0:
        raise ValueError(f"correctness_gated_length: level={level!r} must be in [0, 1] (a correctness ratio or a "
                         "fraction of groups).")  # fmt: skip
    rewards = check_float_tensor(rewards, "rewards", "[N]")
    correct = correct_samples(batch, "correctness_gated_length", column=success_column,
                              threshold=success_threshold).to(rewards.device)  # fmt: skip
    groups = make_groups(batch.group_ids.to(rewards.device), rewards.shape[0], min_size=1)
    present = ~torch.isnan(rewards)  # [N]
    counts = group_sum(present.to(rewards.dtype)[:, None], groups)[:, 0]  # [G]
    ratio = group_sum((correct & present).to(rewards.dtype)[:, None], groups)[:, 0] / counts.clamp_min(1.0)  # [G]
    keep = selected_groups(ratio, selection=selection, level=level)  # [G]
    shaped = torch.where(keep[groups.index], rewards, correct.to(rewards.dtype))  # [N]
    shaped = torch.where(present, shaped, torch.nan)
    return shaped, {"reward_shaping/length_penalty_group_frac": float(keep.double().mean())}
