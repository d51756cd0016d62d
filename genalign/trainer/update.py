"""The policy update of one rollout batch: μ epochs × minibatches (optimizer steps) × micro-batches (accumulation).

Loss math is never written here: the run's :class:`~genalign.algorithms.loss.LossPlan` (the configured objective plus
the KL, regulariser and entropy terms, aggregated with a normaliser computed over the WHOLE optimisation batch, all
micro-batches and all processes) turns each micro-batch's score into a scalar, so that the gradient never depends on
how a batch is split.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.loss import LossPlan
from genalign.algorithms.update_schedules import build_schedule
from genalign.config.schema import AlgorithmConfig
from genalign.policies.base import Policy, Rollout, ScoreOutput, ScoreRequest
from genalign.trainer.distributed import all_reduce_max, all_reduce_sum, full_value
from genalign.trainer.guards import check_parameters, update_is_finite
from genalign.trainer.trained_scoring import score_trained, scored_feature_means


def score_without_grad(
    policy: Policy, rollout: Rollout, micro_batch_size: int, request: ScoreRequest, *, lockstep: bool = False
) -> ScoreOutput:
    """Score ``rollout`` in micro-batches (the same composition as the update) without gradient and join the passes:
    float32 ``logp`` ``[N, T]`` and every requested feature. ``lockstep``: every process makes as many scoring passes
    as the busiest one (sharded modules gather parameters in each pass)."""
    outputs = []
    starts = list(range(0, len(rollout), micro_batch_size))
    policy.on_inner_epoch(0)  # the old log-probs belong to the first pass's likelihood estimate
    with torch.no_grad():
        for start in starts:
            outputs.append(
                policy.score(rollout.select(range(start, min(start + micro_batch_size, len(rollout)))), request)
            )
        for _ in range(all_reduce_max(len(starts)) - len(starts) if lockstep else 0):
            policy.score(rollout.select([0]), request)  # a pass whose result is discarded
    names = [name for name in outputs[0] if all(name in out for out in outputs)] if outputs else []
    features = {name: torch.cat([out[name] for out in outputs]) for name in names}
    return ScoreOutput(torch.cat([out.logp.float() for out in outputs]), features)


def split_minibatches(n: int, minibatches: int) -> list[list[int]]:
    """Contiguous index blocks (groups stay together when ``n`` is a multiple of the group size)."""
    bounds = torch.linspace(0, n, minibatches + 1).round().long().tolist()
    return [list(range(bounds[i], bounds[i + 1])) for i in range(minibatches)]


class _Sums:
    """Action-weighted sums of the micro-batch metrics of one update."""

    def __init__(self) -> None:
        self.values: dict[str, float] = defaultdict(float)
        self.weight = 0.0
        self.grad_norms: list[float] = []
        self.skipped: list[str] = []  # why each skipped optimizer step was skipped

    def add(self, loss: Tensor, metrics: dict[str, Any], mask: Tensor) -> None:
        weight = float(mask.sum())
        self.weight += weight
        self.values["loss"] += float(loss.detach())
        for key, value in metrics.items():
            self.values[key] += float(value) * weight

    def result(self, lr: float) -> dict[str, float]:
        steps = max(len(self.grad_norms), 1)
        result = {k: v / max(self.weight, 1.0) for k, v in self.values.items() if k != "loss"}
        result["loss"] = self.values["loss"] / steps
        result["grad_norm"] = sum(self.grad_norms) / len(self.grad_norms) if self.grad_norms else 0.0
        result["lr"] = lr
        result["guard/optimizer_steps"] = float(len(self.grad_norms) - len(self.skipped))
        result["guard/skipped_optimizer_steps"] = float(len(self.skipped))
        return result


def run_update(
    policy: Policy,
    rollout: Rollout,
    batch: StepBatch,
    plan: LossPlan,
    cfg: AlgorithmConfig,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    parameters: list[nn.Parameter],
    max_grad_norm: float | None,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    *,
    padding: Rollout | None = None,
) -> dict[str, float]:
    """Optimise on one rollout batch and return action-weighted mean metrics.

    ``batch`` is the rollout's step batch (:func:`genalign.trainer.step_batch.build_step_batch`): ``advantages``,
    ``old_logp`` (absent: the update is fully on-policy, one optimizer step per batch, and the detached current
    log-probs are used, so the ratio is exactly 1) and whatever the options read. An optimizer step whose loss,
    gradients or optimizer state hold NaN/inf is skipped (gradients dropped, optimizer and scheduler untouched) and
    counted in ``guard/skipped_optimizer_steps``; parameters that turn non-finite after a step raise
    :class:`~genalign.trainer.guards.NonFiniteTrainingError`. An objective with ``plan.phases = P > 1`` gets the whole
    epochs × minibatches schedule ``P`` times, phase by phase (the batch's ``phase``), against the same old log-probs.

    Args:
        padding: under sharded training, a one-sample rollout that pads this process's micro-batches to the count of
            the busiest process with zero-weight passes (sharded modules gather parameters in every pass, so every
            process must make the same passes). ``None``: no padding (one process, or unsharded).
    """
    request = plan.score_request(policy.capabilities.signals)
    sums = _Sums()
    # the passes over the batch and a hook after each (e.g. [222] SFPO's reposition)
    schedule = build_schedule(cfg.update_schedule, parameters, optimizer, inner_epochs=cfg.inner_epochs)
    advantages = batch.require("advantages", "the update")
    for phase, epoch in itertools.product(range(plan.phases), range(schedule.passes)):
        policy.on_inner_epoch(epoch)  # e.g. d1 draws a fresh mask per inner iteration
        for block in split_minibatches(len(rollout), cfg.minibatches):
            normalizer = all_reduce_sum(plan.normalizer(rollout.action_mask[block], advantages[block]))
            if float(normalizer.sum()) == 0:  # nothing to train on in the whole (global) batch: no optimizer step
                continue
            optimizer.zero_grad(set_to_none=True)
            loss_sum = 0.0
            micro_batches = [block[i : i + cfg.micro_batch_size] for i in range(0, len(block), cfg.micro_batch_size)]
            for micro in micro_batches:
                micro_rollout, micro_batch = rollout.select(micro), batch.select(micro).with_values(phase=phase)
                with autocast():
                    if cfg.score_only_trained:  # NAT [220], S-GRPO [312]: untrained actions are not scored
                        out = score_trained(
                            policy, micro_rollout, advantages[micro], request, micro_batch.get("old_logp")
                        )
                    else:
                        out = policy.score(micro_rollout, request)
                loss, metrics = plan(out, micro_batch, normalizer)
                if cfg.score_only_trained:  # entropy and KL logged over the scored actions
                    metrics = scored_feature_means(metrics, advantages[micro], micro_rollout.action_mask)
                loss.backward()
                loss_sum += float(loss.detach())
                sums.add(loss, metrics, micro_rollout.action_mask)
            if padding is not None:
                for _ in range(all_reduce_max(len(micro_batches)) - len(micro_batches)):
                    _zero_weight_pass(policy, padding, request, autocast)
            grad_norm = _clip_gradients(parameters, max_grad_norm)
            sums.grad_norms.append(grad_norm)
            problem = update_is_finite(loss_sum, grad_norm, optimizer)
            if problem is not None:
                optimizer.zero_grad(set_to_none=True)
                sums.skipped.append(problem)
                continue
            optimizer.step()
            check_parameters(parameters)
            scheduler.step()
            policy.after_optimizer_step()
        schedule.after_pass(epoch)
    result = sums.result(scheduler.get_last_lr()[0]) | schedule.metrics()
    result["guard/skip_reason"] = sums.skipped[-1] if sums.skipped else ""
    return result


def _zero_weight_pass(policy: Policy, padding: Rollout, request: ScoreRequest, autocast) -> None:
    """A scoring pass and a backward whose gradient is exactly zero: the collective calls of a real micro-batch."""
    with autocast():
        out = policy.score(padding, request)
    loss = sum(tensor.float().sum() * 0.0 for tensor in out.differentiable())
    if isinstance(loss, Tensor):
        loss.backward()


def _clip_gradients(parameters: list[nn.Parameter], max_grad_norm: float | None) -> float:
    """Clip the global gradient norm (over all processes' shards) to ``max_grad_norm`` and return it before clipping."""
    norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm or float("inf"))
    return float(full_value(norm))
