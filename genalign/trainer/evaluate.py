"""Held-out evaluation: one sample per prompt with the evaluation sampling settings, scored by the rewards.

Every process evaluates its share of the prompts (every ``world``-th one) under the evaluation weights (e.g. an EMA),
with the parameters gathered once for the whole evaluation; the reward tables and counters are then combined, so every
process returns the same result.

Randomness: evaluation runs under :func:`evaluation_randomness`, which seeds the policy's random generators and the
global ones from ``eval.seed`` and restores them afterwards. Every evaluation (of any run, whatever its ``run.seed``)
therefore samples with the same noise (a flow model starts from the same initial latents for the same prompts; an LM
draws the same uniforms), so two evaluations differ only by the weights, and evaluating more or less often never
changes what training samples.

Progress: the main process shows the evaluation's batches (:class:`genalign.trainer.metrics.Progress`: a bar on a
terminal, else a line every ``progress_every`` batches). The result carries ``time/eval_s`` (the evaluation's
duration) and ``time/unix`` (the wall clock at its end).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import numpy as np
import torch

from genalign.policies.base import Policy, add_counts
from genalign.trainer.distributed import all_gather_cat, rank_and_world, sum_counters
from genalign.trainer.metrics import Progress
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
    progress_every: int | None = None,
) -> dict[str, Any]:
    """Return ``eval/accuracy`` (mean of the accuracy reward), ``eval/reward/<name>`` means and counts, and the
    rollouts' event counts (:attr:`Rollout.counts`: a multi-turn rollout's turns, tool calls by outcome, environment
    errors) summed over the evaluation as ``eval/rollout/<key>``.

    Args:
        accuracy_reward: the reward reported as ``eval/accuracy`` (its metric name or config label; None: the first).
        full_parameters: the trainer's context that gathers sharded parameters for sampling (entered after the
            evaluation weights are swapped in, by every process).
        seed: of the evaluation's randomness (:func:`evaluation_randomness`); the trainer passes ``eval.seed``.
        progress_every: without a terminal, print a progress line every this many batches (default: about ten lines
            per evaluation).
    """
    started = time.monotonic()
    rank, world = rank_and_world()
    mine = rows[rank::world]
    batches = math.ceil(len(mine) / batch_size)
    every = progress_every or math.ceil(batches / 10)
    progress = Progress(batches, "eval batch", every=every, leave=False) if rank == 0 and batches else None
    modules = policy.modules_to_train()
    modes = [m.training for m in modules]
    for m in modules:
        m.eval()
    scores = [torch.empty(0, len(rewards.labels))]
    counts: list[dict[str, int]] = []
    try:
        with (
            torch.no_grad(),
            evaluation_randomness(policy, seed + 7919 * rank),
            policy.evaluation_weights(),
            full_parameters(),
        ):
            for start in range(0, len(mine), batch_size):
                rollout = policy.rollout(mine[start : start + batch_size], 1, mode="eval")
                values, _ = rewards(rollout.rows, rollout.outputs, **rollout.output_columns())
                scores.append(values)
                counts.append(rollout.counts)
                if progress is not None:
                    progress.update(1, f"{min(start + batch_size, len(mine))}/{len(mine)} prompts")
    finally:
        if progress is not None:
            progress.close()
        for m, mode in zip(modules, modes):
            m.train(mode)
    table = all_gather_cat(torch.cat(scores))  # [n, K]
    result: dict[str, Any] = {"eval/num_prompts": len(rows), "eval/num_scored": table.shape[0]}
    result |= {f"eval/{key}": value for key, value in sum_counters(rewards.take_metrics()).items()}
    result |= {f"eval/rollout/{key}": value for key, value in sum_counters(add_counts(counts)).items()}
    for k, name in enumerate(rewards.labels):
        result[f"eval/reward/{name}"] = float(table[:, k].nanmean()) if table.numel() else float("nan")
    result["eval/accuracy"] = result[f"eval/reward/{rewards.name_of(accuracy_reward)}"]
    result |= {"time/eval_s": time.monotonic() - started, "time/unix": time.time()}
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
