"""The policy update of one rollout batch: μ epochs × minibatches (optimizer steps) × micro-batches (accumulation).

A policy may define ``objective(batch, score_output, advantages) -> (per_action_loss [n, T], metrics)`` to replace the
ratio objective (likelihood-free methods such as DiffusionNFT); aggregation stays shared. Loss math is never written here: per-action losses come from :func:`genalign.algorithms.policy_loss` and are turned
into a scalar by :func:`genalign.algorithms.aggregate` with a normaliser computed over the WHOLE optimisation batch
(all micro-batches, all processes), so that the gradient never depends on how a batch is split.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from genalign import algorithms as alg
from genalign.config.schema import AlgorithmConfig
from genalign.policies.base import Policy, Rollout
from genalign.trainer.distributed import all_reduce_sum, sum_gradients


@dataclass
class PrePass:
    """Quantities scored under ``no_grad`` before the update. All ``[N, T]`` or ``None``."""

    old_logp: Tensor | None = None
    entropy: Tensor | None = None
    kl: Tensor | None = None


def score_without_grad(
    policy: Policy, rollout: Rollout, micro_batch_size: int, *, entropy: bool, kl_estimator: str | None
) -> PrePass:
    """Score ``rollout`` in micro-batches (the same composition as the update) without gradient."""
    logps, entropies, kls = [], [], []
    if callable(getattr(policy, "set_inner_epoch", None)):
        policy.set_inner_epoch(0)  # the old log-probs belong to the first pass's likelihood estimate
    with torch.no_grad():
        for start in range(0, len(rollout), micro_batch_size):
            out = policy.score(
                rollout.select(range(start, min(start + micro_batch_size, len(rollout)))),
                entropy=entropy,
                kl_estimator=kl_estimator,
            )
            logps.append(out.logp.float())
            entropies.append(out.entropy)
            kls.append(out.kl)
    cat = lambda xs: torch.cat(xs) if xs and all(x is not None for x in xs) else None  # noqa: E731
    return PrePass(old_logp=torch.cat(logps), entropy=cat(entropies), kl=cat(kls))


def _chunks(indices: list[int], size: int) -> list[list[int]]:
    return [indices[i : i + size] for i in range(0, len(indices), size)]


def split_minibatches(n: int, minibatches: int) -> list[list[int]]:
    """Contiguous index blocks (groups stay together when ``n`` is a multiple of the group size)."""
    bounds = torch.linspace(0, n, minibatches + 1).round().long().tolist()
    return [list(range(bounds[i], bounds[i + 1])) for i in range(minibatches)]


def run_update(
    policy: Policy,
    rollout: Rollout,
    advantages: Tensor,
    old_logp: Tensor | None,
    cfg: AlgorithmConfig,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    parameters: list[nn.Parameter],
    max_grad_norm: float | None,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    *,
    group_reward_std: Tensor | None = None,
    group_mean: Tensor | None = None,
    progress: float | None = None,
) -> dict[str, float]:
    """Optimise on one rollout batch and return action-weighted mean metrics.

    Args:
        advantages: ``[N]`` or ``[N, T]`` (per-action credit already applied).
        old_logp: ``[N, T]`` log-probs before the update, or ``None`` when the update is fully on-policy (one optimizer
            step per batch), in which case the detached current log-probs are used and the ratio is exactly 1.
        group_reward_std, group_mean: ``[N]`` statistics of each sample's group, for the objective context and
            regularisers that read them; progress: ``step / max_steps``.
    """
    kl_in_loss = cfg.kl_coef > 0 and cfg.kl_placement == "loss"
    sums: dict[str, float] = defaultdict(float)
    grad_norms: list[float] = []
    weight_total = 0.0
    after_step = getattr(policy, "after_optimizer_step", None)
    custom_objective = getattr(policy, "objective", None)
    want_entropy = cfg.entropy_coef > 0 or getattr(policy, "has_action_entropy", True)  # logged when available
    needs = alg.REGULARIZERS.meta(cfg.regularizer).get("needs", ()) if cfg.regularizer else ()
    kl_estimator = cfg.kl_estimator if kl_in_loss or "kl" in needs else None
    # vocabulary regularisers: the policy evaluates the option's per-token term inside its chunked log-prob pass
    vocab = {"vocab_term": alg.bind_vocab_term(cfg.regularizer, **cfg.regularizer_args)} if "vocab" in needs else {}
    set_inner_epoch = getattr(policy, "set_inner_epoch", None)
    for epoch in range(cfg.inner_epochs):
        if callable(set_inner_epoch):  # e.g. d1 draws a fresh mask per inner iteration
            set_inner_epoch(epoch)
        for block in split_minibatches(len(rollout), cfg.minibatches):
            mask = rollout.action_mask[block]  # [n, T]
            normalizer = all_reduce_sum(
                alg.loss_normalizer(mask, cfg.aggregation, advantages=advantages[block], **cfg.aggregation_args)
            )
            if float(normalizer.sum()) == 0:  # nothing to train on in the whole (global) batch: no optimizer step
                continue
            optimizer.zero_grad(set_to_none=True)
            for micro in _chunks(block, cfg.micro_batch_size):
                batch = rollout.select(micro)
                with autocast():
                    out = policy.score(batch, entropy=want_entropy, kl_estimator=kl_estimator, **vocab)
                logp = out.logp.float()  # [m, T]
                device = logp.device
                adv = advantages[micro].to(device)
                old = logp.detach() if old_logp is None else old_logp[micro].to(device)
                if custom_objective is not None:  # likelihood-free objectives (e.g. DiffusionNFT) own their loss
                    per_action, metrics = custom_objective(batch, out, adv)
                elif cfg.objective != "clipped_ratio":  # ratio-free objectives on sequence likelihoods (wd1, SPG)
                    per_action, metrics = alg.LIKELIHOOD_OBJECTIVES.get(cfg.objective)(
                        logp, old, adv, batch.action_mask.to(device), group_ids=batch.group_ids.to(device),
                        **cfg.objective_args,
                    )  # fmt: skip
                else:
                    context = alg.ObjectiveContext(
                        entropy=None if out.entropy is None else out.entropy.detach().float(),
                        rollout_logp=batch.old_logp.to(device),  # behaviour log-probs recorded by the sampler
                        group_reward_std=None if group_reward_std is None else group_reward_std[micro].to(device),
                        progress=progress,
                    )
                    per_action, metrics = alg.policy_loss(
                        logp, old, adv, batch.action_mask.to(device),
                        ratio_level=cfg.ratio_level, clip=cfg.clip, context=context, **cfg.objective_args,
                    )  # fmt: skip
                if kl_in_loss:
                    per_action = per_action + cfg.kl_coef * out.kl.float()  # [m, T]
                if cfg.regularizer is not None:
                    inputs = alg.RegularizerInputs(
                        logp=logp, mask=batch.action_mask.to(device), old_logp=old, advantages=adv,
                        entropy=out.entropy, kl=out.kl, vocab=out.vocab_term,
                        group_success=None if group_mean is None else group_mean[micro].to(device),
                    )  # fmt: skip
                    regularizer = alg.REGULARIZERS.get(cfg.regularizer)(inputs, **cfg.regularizer_args)
                    per_action = per_action + cfg.regularizer_coef * regularizer  # [m, T]
                if cfg.entropy_coef and out.entropy is not None:
                    per_action = per_action - cfg.entropy_coef * out.entropy.float()  # [m, T]
                loss = alg.aggregate(
                    per_action, batch.action_mask.to(device), cfg.aggregation, normalizer.to(device),
                    advantages=adv, **cfg.aggregation_args,
                )  # fmt: skip
                loss.backward()
                weight = float(batch.action_mask.sum())
                weight_total += weight
                sums["loss"] += float(loss.detach())
                for key, value in metrics.items():
                    sums[key] += float(value) * weight
                if out.entropy is not None:
                    sums["entropy"] += float((out.entropy.detach().float() * batch.action_mask.to(device)).sum())
                if out.kl is not None:
                    sums["kl"] += float((out.kl.detach().float() * batch.action_mask.to(device)).sum())
            sum_gradients(parameters)
            grad_norms.append(float(torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm or float("inf"))))
            optimizer.step()
            scheduler.step()
            if callable(after_step):
                after_step()
    steps = max(len(grad_norms), 1)
    result = {k: v / max(weight_total, 1.0) for k, v in sums.items() if k != "loss"}
    result["loss"] = sums["loss"] / steps
    result["grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else 0.0
    result["lr"] = scheduler.get_last_lr()[0]
    return result
