"""Blockwise advantages for structured generations: each objective's reward credits only its own text block (rule of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.signals import declare_signal

declare_signal("block_ids", ("N", "T"), "rollout",
               "The text block of each action: the number of configured block markers that start at or before the "
               "action; non-decreasing along T.", source="[56] blockwise advantages, [175] SD-GRPO", dtype="integer")  # fmt: skip


def _stratified_mean(values: Tensor, valid: Tensor, keys: Tensor) -> Tensor:
    """``[N]``: the mean of ``values`` over the valid samples sharing each sample's key (``keys`` ``[N]`` long)."""
    _, inverse = keys.unique(return_inverse=True)
    size = int(inverse.max()) + 1
    total = torch.zeros(size, dtype=values.dtype).index_add_(0, inverse, torch.where(valid, values, 0.0))
    count = torch.zeros(size, dtype=values.dtype).index_add_(0, inverse, valid.to(values.dtype))
    return (total / count.clamp_min(1))[inverse]


def _group_std(values: Tensor, valid: Tensor, groups: Tensor) -> Tensor:
    """``[N]`` unbiased std of ``values`` over the valid samples of each sample's group (0 for fewer than two)."""
    mean = _stratified_mean(values, valid, groups)
    size = int(groups.max()) + 1
    square = torch.where(valid, (values - mean) ** 2, 0.0)
    total = torch.zeros(size, dtype=values.dtype).index_add_(0, groups, square)
    count = torch.zeros(size, dtype=values.dtype).index_add_(0, groups, valid.to(values.dtype))
    return (total / (count - 1).clamp_min(1)).sqrt()[groups] * (count[groups] > 1)


def block_advantages(
    block_rewards: Tensor, group_ids: Tensor, outcome: Tensor, *, normalize: bool = True, eps: float = 1e-6
) -> Tensor:
    """``[N, B]`` advantages of each block's reward with the outcome-conditioned baseline.

    Args:
        block_rewards: ``[N, B]`` reward of each block (NaN = missing: advantage 0).
        group_ids: ``[N]`` group of each sample.
        outcome: ``[N]`` long intermediate outcome derived from the first block (e.g. correct / incorrect).
        normalize: divide by the group's std of the block reward (GRPO); else the baseline alone (Dr. GRPO).
    """
    groups = group_ids.unique(return_inverse=True)[1].cpu()
    rewards = block_rewards.detach().float().cpu()
    outcome = outcome.long().cpu()
    columns = []
    for block in range(rewards.shape[1]):
        values = rewards[:, block]
        valid = ~values.isnan()
        values = values.nan_to_num(0.0)
        keys = groups if block == 0 else groups * (int(outcome.max()) + 1) + outcome  # stratify later blocks
        advantage = values - _stratified_mean(values, valid, keys)  # [N]
        if normalize:
            advantage = advantage / (_group_std(values, valid, groups) + eps)
        columns.append(torch.where(valid, advantage, 0.0))
    return torch.stack(columns, dim=1)  # [N, B]


@CREDIT_RULES.register(
    "blockwise",
    needs=("block_ids", "rewards"),
    replaces=True,
    formula="r_ib = Σ_{k → block b} r_ik; A_i0 = (r_i0 − mean_G)/(std_G + ε); b > 0: A_ib = (r_ib − mean over the "
    "group's samples with the same intermediate outcome o_i = [r_{i,k_o} > θ])/(std_G + ε); action t of block b gets "
    "A_ib",
    source="[56] Blockwise Advantage Estimation (outcome-conditioned baseline)",
    summary="Each objective's reward gives its own advantage to its own text block; later blocks use a baseline "
    "stratified by the outcome of the earlier block.",
)
def blockwise(
    advantages: Tensor,
    batch: StepBatch,
    *,
    reward_blocks: Sequence[int] | None = None,
    outcome_reward: int = 0,
    outcome_threshold: float = 0.5,
    normalize: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Blockwise Advantage Estimation [56] with the Outcome-Conditioned Baseline.

    A structured completion has text blocks (``block_ids``: the family splits it at the configured
    ``policy.probes.block_markers``, e.g. a solution block and a confidence block). Each reward function is assigned
    to one block (``reward_blocks[k]``, default: reward ``k`` to block ``k``); a block's reward is the sum of its
    rewards, and its advantage is applied to the block's actions only, so an objective never credits another block's
    tokens. The first block uses the group mean as baseline. A later block's reward is conditioned on the sampled
    prefix; instead of nested rollouts, its baseline is the mean over the group's samples with the same intermediate
    outcome ``o_i = [r_{i, outcome_reward} > outcome_threshold]`` (e.g. whether the answer of the first block is
    correct), the within-group stratification of the abstract.

    Reading chosen: the outcome is a thresholded reward column and the spread is the group's std of the block reward
    (GRPO's normalisation; ``normalize=False`` keeps the centred reward). A sample alone in its stratum gets 0 for
    that block. Actions past the last configured block get the last block's advantage.

    Args:
        advantages: ``[N, T]`` incoming advantages (replaced).
        batch: reads ``rewards`` ``[N, K]`` (raw, per reward function), ``block_ids``, ``group_ids`` and
            ``mask``.
        reward_blocks: block index of each reward column (``K`` entries).
        outcome_reward: the reward column whose value defines the intermediate outcome.
        outcome_threshold: ``θ``.
        normalize: divide by the group's std of each block reward.
        eps: added to the std.
    Returns:
        ``[N, T]`` per-action advantages (0 on padding).
    """
    rewards = batch.require("rewards", "blockwise").float()  # [N, K]
    num_rewards = rewards.shape[1]
    blocks_of = list(range(num_rewards)) if reward_blocks is None else [int(b) for b in reward_blocks]
    if len(blocks_of) != num_rewards or min(blocks_of) < 0:
        raise ValueError(
            f"reward_blocks={reward_blocks!r} must give a block index >= 0 for each of the {num_rewards} rewards"
        )
    if not 0 <= outcome_reward < num_rewards:
        raise ValueError(f"outcome_reward={outcome_reward} must index one of the {num_rewards} reward columns")
    num_blocks = max(blocks_of) + 1
    block_rewards = torch.full((rewards.shape[0], num_blocks), float("nan"))
    for block in range(num_blocks):
        columns = rewards[:, [k for k, b in enumerate(blocks_of) if b == block]].cpu()  # [N, k_b]
        if columns.shape[1]:
            summed = columns.nan_to_num(0.0).sum(1)
            block_rewards[:, block] = torch.where(columns.isnan().all(1), float("nan"), summed)
    outcome = (rewards[:, outcome_reward].nan_to_num(float("-inf")) > outcome_threshold).long()  # [N]
    per_block = block_advantages(block_rewards, batch.group_ids, outcome, normalize=normalize, eps=eps)  # [N, B]
    block_ids = batch.require("block_ids", "credit rule 'blockwise'").long().cpu().clamp(0, num_blocks - 1)
    result = per_block.gather(1, block_ids).to(advantages.device)  # [N, T]
    return torch.where(batch.mask.to(advantages.device) > 0, result, 0.0).to(advantages.dtype)
