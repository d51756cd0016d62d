"""Held-out evaluation: one sample per prompt with the evaluation sampling settings, scored by the rewards.

Every process evaluates its share of the prompts (every ``world``-th one) under the evaluation weights (e.g. an EMA),
with the parameters gathered once for the whole evaluation; the reward tables and counters are then combined, so every
process returns the same result.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from genalign.policies.base import Policy
from genalign.trainer.distributed import all_gather_cat, rank_and_world, sum_counters
from genalign.trainer.rewards import RewardSet


def evaluate(
    policy: Policy,
    rows: list[dict[str, Any]],
    rewards: RewardSet,
    *,
    batch_size: int,
    accuracy_reward: str | None,
    full_parameters: Callable[[], AbstractContextManager] = nullcontext,
) -> dict[str, Any]:
    """Return ``eval/accuracy`` (mean of the accuracy reward), ``eval/reward/<label>`` means and counts.

    Args:
        full_parameters: the trainer's context that gathers sharded parameters for sampling (entered after the
            evaluation weights are swapped in, by every process).
    """
    rank, world = rank_and_world()
    mine = rows[rank::world]
    modules = policy.modules_to_train()
    modes = [m.training for m in modules]
    for m in modules:
        m.eval()
    scores = [torch.empty(0, len(rewards.labels))]
    try:
        with torch.no_grad(), policy.evaluation_weights(), full_parameters():
            for start in range(0, len(mine), batch_size):
                rollout = policy.rollout(mine[start : start + batch_size], 1, mode="eval")
                values, _ = rewards(rollout.rows, rollout.outputs)
                scores.append(values)
    finally:
        for m, mode in zip(modules, modes):
            m.train(mode)
    table = all_gather_cat(torch.cat(scores))  # [n, K]
    result: dict[str, Any] = {"eval/num_prompts": len(rows), "eval/num_scored": table.shape[0]}
    result |= {f"eval/{key}": value for key, value in sum_counters(rewards.take_metrics()).items()}
    for k, label in enumerate(rewards.labels):
        result[f"eval/reward/{label}"] = float(table[:, k].nanmean()) if table.numel() else float("nan")
    accuracy_label = accuracy_reward or rewards.labels[0]
    result["eval/accuracy"] = result[f"eval/reward/{accuracy_label}"]
    return result
