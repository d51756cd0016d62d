"""Held-out evaluation: one sample per prompt with the evaluation sampling settings, scored by the rewards.

Every process evaluates its share of the prompts (every ``world``-th one) under the evaluation weights (e.g. an EMA),
with the parameters gathered once for the whole evaluation; the reward tables and counters are then combined, so every
process returns the same result.

Randomness: evaluation runs under :func:`evaluation_randomness`, which seeds the policy's random generators and the
global ones from ``eval.seed`` and restores them afterwards. Every evaluation (of any run, whatever its ``run.seed``)
therefore samples with the same noise (a flow model starts from the same initial latents for the same prompts; an LM
draws the same uniforms), so two evaluations differ only by the weights, and evaluating more or less often never
changes what training samples.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import numpy as np
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
    seed: int = 0,
) -> dict[str, Any]:
    """Return ``eval/accuracy`` (mean of the accuracy reward), ``eval/reward/<label>`` means and counts.

    Args:
        full_parameters: the trainer's context that gathers sharded parameters for sampling (entered after the
            evaluation weights are swapped in, by every process).
        seed: of the evaluation's randomness (:func:`evaluation_randomness`); the trainer passes ``eval.seed``.
    """
    rank, world = rank_and_world()
    mine = rows[rank::world]
    modules = policy.modules_to_train()
    modes = [m.training for m in modules]
    for m in modules:
        m.eval()
    scores = [torch.empty(0, len(rewards.labels))]
    try:
        with (
            torch.no_grad(),
            evaluation_randomness(policy, seed + 7919 * rank),
            policy.evaluation_weights(),
            full_parameters(),
        ):
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


@contextmanager
def evaluation_randomness(policy: Policy, seed: int) -> Iterator[None]:
    """Run the body with the policy's random generators (:meth:`Policy.random_generators`) and the global torch,
    Python and NumPy generators seeded from ``seed``, and put every one of them back as it was afterwards."""
    generators = policy.random_generators()
    saved = {name: generator.get_state() for name, generator in generators.items()}
    python_state, numpy_state = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    try:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed % 2**32)
            for offset, name in enumerate(sorted(generators), start=1):
                generators[name].manual_seed(seed + offset)
            yield
    finally:
        for name, generator in generators.items():
            generator.set_state(saved[name])
        random.setstate(python_state)
        np.random.set_state(numpy_state)
