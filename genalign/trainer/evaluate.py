"""Held-out evaluation: one sample per prompt with the evaluation sampling settings, scored by the rewards."""

from __future__ import annotations

from typing import Any

import torch

from genalign.policies.base import Policy
from genalign.trainer.rewards import RewardSet


def evaluate(
    policy: Policy, rows: list[dict[str, Any]], rewards: RewardSet, *, batch_size: int, accuracy_reward: str | None
) -> dict[str, Any]:
    """Return ``eval/accuracy`` (mean of the accuracy reward), ``eval/reward/<label>`` means and counts."""
    modules = policy.modules_to_train()
    modes = [m.training for m in modules]
    for m in modules:
        m.eval()
    scores = []
    try:
        with torch.no_grad():
            for start in range(0, len(rows), batch_size):
                rollout = policy.rollout(rows[start : start + batch_size], 1, mode="eval")
                values, _ = rewards(rollout.rows, rollout.outputs)
                scores.append(values)
    finally:
        for m, mode in zip(modules, modes):
            m.train(mode)
    table = torch.cat(scores) if scores else torch.empty(0, len(rewards.labels))  # [n, K]
    result: dict[str, Any] = {"eval/num_prompts": len(rows), "eval/num_scored": table.shape[0]}
    result |= {f"eval/{key}": value for key, value in rewards.take_metrics().items()}
    for k, label in enumerate(rewards.labels):
        result[f"eval/reward/{label}"] = float(table[:, k].nanmean()) if table.numel() else float("nan")
    accuracy_label = accuracy_reward or rewards.labels[0]
    result["eval/accuracy"] = result[f"eval/reward/{accuracy_label}"]
    return result
