"""The policy update of one rollout batch: μ epochs × minibatches (optimizer steps) × micro-batches (accumulation).

Loss math is never written here: per-action losses come from the configured objective of
:data:`genalign.algorithms.OBJECTIVES` (one signature for ratio, likelihood-weighted and likelihood-free objectives)
plus the KL, regulariser and entropy terms, and are turned into a scalar by :func:`genalign.algorithms.aggregate` with a
normaliser computed over the WHOLE optimisation batch (all micro-batches, all processes), so that the gradient never
depends on how a batch is split.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from genalign import algorithms as alg
from genalign.algorithms.kl import importance_weighted_kl
from genalign.algorithms.objectives.base import Objective
from genalign.config.schema import AlgorithmConfig
from genalign.policies.base import Policy, Rollout, ScoreOutput, ScoreRequest
from genalign.trainer.distributed import all_reduce_max, all_reduce_sum, full_value
from genalign.trainer.guards import check_parameters, update_is_finite
from genalign.trainer.slow_fast import build_schedule


@dataclass
class ScoredBatch:
    """Quantities scored under ``no_grad`` before the update. All ``[N, T]`` or ``None``."""

    logp: Tensor | None = None
    entropy: Tensor | None = None
    kl: Tensor | None = None
    logit_stats: Tensor | None = None  # [N, T, 2]
    hidden: Tensor | None = None  # [N, T, H]
    logp_without_image: Tensor | None = None  # [N, T]
    logp_frames_shuffled: Tensor | None = None  # [N, T]
    visual_similarity: Tensor | None = None  # [N, T]


def score_without_grad(
    policy: Policy, rollout: Rollout, micro_batch_size: int, request: ScoreRequest, *, lockstep: bool = False
) -> ScoredBatch:
    """Score ``rollout`` in micro-batches (the same composition as the update) without gradient. ``lockstep``: every
    process makes as many scoring passes as the busiest one (sharded modules gather parameters in each pass)."""
    logps, entropies, kls, stats, hiddens = [], [], [], [], []
    without_image, shuffled, similarity = [], [], []
    starts = list(range(0, len(rollout), micro_batch_size))
    policy.on_inner_epoch(0)  # the old log-probs belong to the first pass's likelihood estimate
    with torch.no_grad():
        for start in starts:
            out = policy.score(rollout.select(range(start, min(start + micro_batch_size, len(rollout)))), request)
            logps.append(out.logp.float())
            entropies.append(out.entropy)
            kls.append(out.kl)
            stats.append(out.logit_stats)
            hiddens.append(out.hidden)
            without_image.append(out.logp_without_image)
            shuffled.append(out.logp_frames_shuffled)
            similarity.append(out.visual_similarity)
        for _ in range(all_reduce_max(len(starts)) - len(starts) if lockstep else 0):
            policy.score(rollout.select([0]), request)  # a pass whose result is discarded
    cat = lambda xs: torch.cat(xs) if xs and all(x is not None for x in xs) else None  # noqa: E731
    return ScoredBatch(
        logp=torch.cat(logps),
        entropy=cat(entropies),
        kl=cat(kls),
        logit_stats=cat(stats),
        hidden=cat(hiddens),
        logp_without_image=cat(without_image),
        logp_frames_shuffled=cat(shuffled),
        visual_similarity=cat(similarity),
    )


def split_minibatches(n: int, minibatches: int) -> list[list[int]]:
    """Contiguous index blocks (groups stay together when ``n`` is a multiple of the group size)."""
    bounds = torch.linspace(0, n, minibatches + 1).round().long().tolist()
    return [list(range(bounds[i], bounds[i + 1])) for i in range(minibatches)]


@dataclass(frozen=True)
class UpdatePlan:
    """The configured method as the update runs it, resolved once per update.

    Attributes:
        request: what each micro-batch's scoring pass computes: entropy whenever the family has it (logged), the KL of
            a KL term or regulariser, the vocabulary term of a vocabulary regulariser, the velocities of a
            likelihood-free objective.
        objective: the objective function; objective_kwargs: its keyword arguments.
        phases: how many times the update runs over the batch (objective meta ``phases``, e.g. Lopti's separate
            update of low- and high-probability tokens); phase: the phase being run (``ObjectiveContext.phase``).
    """

    request: ScoreRequest
    objective: Objective
    objective_kwargs: dict[str, Any]
    phases: int = 1
    phase: int = 0

    @classmethod
    def build(cls, cfg: AlgorithmConfig, policy: Policy) -> UpdatePlan:
        needs = cfg.needs()
        kl_in_loss = cfg.kl_coef > 0 and cfg.kl_placement == "loss"
        vocab = alg.bind_vocab_term(cfg.regularizer, **cfg.regularizer_args) if "vocab_term" in needs else None
        request = ScoreRequest(
            entropy="entropy" in policy.capabilities.score_features,
            kl_estimator=cfg.kl_estimator if kl_in_loss or "kl" in needs else None,
            vocab_term=vocab,
            velocity="velocity" in needs,
        )
        return cls(request, alg.OBJECTIVES.get(cfg.objective), cfg.objective_kwargs(), cfg.update_phases())


@dataclass
class UpdateBatch:
    """What the update reads of one rollout batch besides the rollout itself; ``[N]`` or ``[N, T]`` tensors."""

    advantages: Tensor  # [N] or [N, T] after credit
    old_logp: Tensor | None  # [N, T], or None when the update is fully on-policy
    group_reward_std: Tensor | None = None  # [N]
    group_mean: Tensor | None = None  # [N]
    progress: float | None = None


class _Sums:
    """Action-weighted sums of the micro-batch metrics of one update."""

    def __init__(self) -> None:
        self.values: dict[str, float] = defaultdict(float)
        self.weight = 0.0
        self.grad_norms: list[float] = []
        self.skipped: list[str] = []  # why each skipped optimizer step was skipped

    def add(self, loss: Tensor, metrics: dict[str, Any], out: ScoreOutput, mask: Tensor) -> None:
        weight = float(mask.sum())
        self.weight += weight
        self.values["loss"] += float(loss.detach())
        for key, value in metrics.items():
            self.values[key] += float(value) * weight
        for key, value in (("entropy", out.entropy), ("kl", out.kl)):
            if value is not None:
                self.values[key] += float((value.detach().float() * mask).sum())

    def result(self, lr: float) -> dict[str, float]:
        steps = max(len(self.grad_norms), 1)
        result = {k: v / max(self.weight, 1.0) for k, v in self.values.items() if k != "loss"}
        result["loss"] = self.values["loss"] / steps
        result["grad_norm"] = sum(self.grad_norms) / len(self.grad_norms) if self.grad_norms else 0.0
        result["lr"] = lr
        result["guard/optimizer_steps"] = float(len(self.grad_norms) - len(self.skipped))
        result["guard/skipped_optimizer_steps"] = float(len(self.skipped))
        return result


def micro_batch_loss(
    policy: Policy,
    batch: Rollout,
    micro: list[int],
    inputs: UpdateBatch,
    cfg: AlgorithmConfig,
    plan: UpdatePlan,
    normalizer: Tensor,
    autocast: Callable[[], contextlib.AbstractContextManager],
) -> tuple[Tensor, dict[str, Tensor], ScoreOutput]:
    """Score one micro-batch and return its aggregated loss (to backpropagate), the objective's metrics and the score.

    The per-action loss is the objective's, plus ``β·KL`` (KL in the loss), the regulariser and the entropy bonus.
    """
    with autocast():
        out = policy.score(batch, plan.request)
    logp = out.logp.float()  # [m, T]
    device = logp.device
    mask = batch.action_mask.to(device)  # [m, T]
    adv = inputs.advantages[micro].to(device)  # [m] or [m, T]
    old = logp.detach() if inputs.old_logp is None else inputs.old_logp[micro].to(device)  # [m, T]
    context = alg.ObjectiveContext(
        entropy=None if out.entropy is None else out.entropy.detach().float(),
        rollout_logp=batch.old_logp.to(device),  # behaviour log-probs recorded by the sampler
        segment_ids=None if batch.structure.segment_ids is None else batch.structure.segment_ids.to(device),
        group_reward_std=None if inputs.group_reward_std is None else inputs.group_reward_std[micro].to(device),
        progress=inputs.progress,
        old_logp=old,
        mask=mask,
        group_ids=batch.group_ids.to(device),
        phase=plan.phase,
    )
    per_action, metrics = plan.objective(out, adv, context, **plan.objective_kwargs)  # [m, T]
    if cfg.kl_coef > 0 and cfg.kl_placement == "loss":
        per_action = per_action + cfg.kl_coef * _kl_term(out.kl.float(), logp, old, mask, cfg)  # [m, T]
    if cfg.regularizer is not None:
        regularizer_inputs = alg.RegularizerInputs(
            logp=logp, mask=mask, old_logp=old, advantages=adv, entropy=out.entropy, kl=out.kl, vocab=out.vocab_term,
            group_success=None if inputs.group_mean is None else inputs.group_mean[micro].to(device),
        )  # fmt: skip
        regularizer = alg.REGULARIZERS.get(cfg.regularizer)(regularizer_inputs, **cfg.regularizer_args)
        per_action = per_action + cfg.regularizer_coef * regularizer  # [m, T]
    if cfg.entropy_coef and out.entropy is not None:
        per_action = per_action - cfg.entropy_coef * out.entropy.float()  # [m, T]
    loss = alg.aggregate(
        per_action, mask, cfg.aggregation, normalizer.to(device), advantages=adv, **cfg.aggregation_args
    )
    return loss, metrics, out


def _kl_term(kl: Tensor, logp: Tensor, old: Tensor, mask: Tensor, cfg: AlgorithmConfig) -> Tensor:
    """The per-action KL of the loss ``[m, T]``, times the importance ratio when ``kl_importance_correction`` asks."""
    if cfg.kl_importance_correction == "none":
        return kl
    return importance_weighted_kl(kl, logp, old, mask, level=cfg.kl_importance_correction)


def run_update(
    policy: Policy,
    rollout: Rollout,
    inputs: UpdateBatch,
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

    ``inputs.old_logp`` ``None`` means the update is fully on-policy (one optimizer step per batch): the detached
    current log-probs are used and the ratio is exactly 1. An optimizer step whose loss, gradients or optimizer state
    hold NaN/inf is skipped (gradients dropped, optimizer and scheduler untouched) and counted in
    ``guard/skipped_optimizer_steps``; parameters that turn non-finite after a step raise
    :class:`~genalign.trainer.guards.NonFiniteTrainingError`. An objective with meta ``phases = P > 1`` gets the whole
    epochs × minibatches schedule ``P`` times, phase by phase (``ObjectiveContext.phase``), against the same old
    log-probs.

    Args:
        padding: under sharded training, a one-sample rollout that pads this process's micro-batches to the count of
            the busiest process with zero-weight passes (sharded modules gather parameters in every pass, so every
            process must make the same passes). ``None``: no padding (one process, or unsharded).
    """
    base_plan = UpdatePlan.build(cfg, policy)
    sums = _Sums()
    # the passes over the batch and a hook after each (e.g. [222] SFPO's reposition)
    schedule = build_schedule(
        cfg.update_schedule, cfg.update_schedule_args, parameters, optimizer, inner_epochs=cfg.inner_epochs
    )
    for phase, epoch in itertools.product(range(base_plan.phases), range(schedule.passes)):
        plan = replace(base_plan, phase=phase)
        policy.on_inner_epoch(epoch)  # e.g. d1 draws a fresh mask per inner iteration
        for block in split_minibatches(len(rollout), cfg.minibatches):
            mask = rollout.action_mask[block]  # [n, T]
            normalizer = all_reduce_sum(
                alg.loss_normalizer(mask, cfg.aggregation, advantages=inputs.advantages[block], **cfg.aggregation_args)
            )
            if float(normalizer.sum()) == 0:  # nothing to train on in the whole (global) batch: no optimizer step
                continue
            optimizer.zero_grad(set_to_none=True)
            loss_sum = 0.0
            micro_batches = [block[i : i + cfg.micro_batch_size] for i in range(0, len(block), cfg.micro_batch_size)]
            for micro in micro_batches:
                batch = rollout.select(micro)
                loss, metrics, out = micro_batch_loss(policy, batch, micro, inputs, cfg, plan, normalizer, autocast)
                loss.backward()
                loss_sum += float(loss.detach())
                sums.add(loss, metrics, out, batch.action_mask.to(out.logp.device))
            if padding is not None:
                for _ in range(all_reduce_max(len(micro_batches)) - len(micro_batches)):
                    _zero_weight_pass(policy, padding, plan, autocast)
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


def _zero_weight_pass(policy: Policy, padding: Rollout, plan: UpdatePlan, autocast) -> None:
    """A scoring pass and a backward whose gradient is exactly zero: the collective calls of a real micro-batch."""
    with autocast():
        out = policy.score(padding, plan.request)
    features = [out.logp, out.entropy, out.kl, out.vocab_term]
    if out.velocity is not None:
        features.append(out.velocity.current)
    loss = sum(f.float().sum() * 0.0 for f in features if f is not None and f.requires_grad)
    if isinstance(loss, Tensor):
        loss.backward()


def _clip_gradients(parameters: list[nn.Parameter], max_grad_norm: float | None) -> float:
    """Clip the global gradient norm (over all processes' shards) to ``max_grad_norm`` and return it before clipping."""
    norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm or float("inf"))
    return float(full_value(norm))
