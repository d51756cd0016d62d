"""A proximity term to the previous policy (the one that sampled the batch): the mirror-descent step of MDPO [122],
also HAEPO's soft KL to a frozen copy of the previous policy [46] (experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.regularizers.base import REGULARIZERS, valid_mask
from genalign.algorithms.scores import ScoreOutput

#: the log-ratio is clamped to this range before ``exp`` (a diverged action must not turn the penalty into ``inf``)
MAX_LOG_RATIO = 20.0


def kl_to_old_from_old_samples(log_ratio: Tensor) -> Tensor:
    """Per-action estimate of ``KL(πθ ‖ π_old)`` from actions sampled by ``π_old``: ``ρ·log ρ − ρ + 1`` with
    ``ρ = exp(log_ratio)`` (``[N, T]``). Unbiased (``E_{π_old}[ρ log ρ] = KL(πθ‖π_old)`` and ``E_{π_old}[ρ − 1] = 0``),
    never negative, and 0 with zero gradient at ``ρ = 1``; its gradient is ``ρ·log ρ·∇logπθ``."""
    ratio = log_ratio.exp()
    return ratio * log_ratio - ratio + 1.0


@REGULARIZERS.register(
    "mirror_descent_kl",
    formula="L_it = (1/t_k)·(ρ log ρ − ρ + 1), ρ = πθ/π_old (an unbiased estimate of KL(πθ‖π_old) from π_old's "
    "samples); t_k = step_size, or linear from step_size to step_size_end over training",
    source="[122] MDPO (on-policy mirror descent: linearised objective + KL proximity, several gradient steps); "
    "[46] HAEPO's soft KL to the previous policy",
    summary="KL proximity to the policy that sampled the batch instead of a clip: with clip none and several "
    "optimizer steps per batch, each batch approximately solves one mirror-descent trust-region step.",
)
def mirror_descent_kl(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    step_size: float = 1.0,
    step_size_end: float | None = None,
) -> Tensor:
    """MDPO [122]: each update approximately solves ``max_θ E[ρA] − (1/t_k)·KL(πθ ‖ π_k)`` by several gradient steps
    on the batch sampled by ``π_k`` (``algorithm.inner_epochs`` / ``minibatches`` > 1; with one optimizer step per
    batch the term is 0 with zero gradient). Pair it with ``clip: none`` (the linearised objective ``ρA``): the
    proximity term, not a clip, keeps consecutive policies close.

    Reading chosen: the abstract leaves the proximity term open ("a proximity term that restricts two consecutive
    policies"); genalign takes MDPO's on-policy KL direction ``KL(πθ ‖ π_old)`` with the per-action estimate
    :func:`kl_to_old_from_old_samples` (the batch's actions come from ``π_old``, and no old logits are kept), and the
    step size ``t_k`` either constant or linear in training progress (MDPO anneals it; ``step_size_end`` > 0 keeps
    ``1/t_k`` finite). ``regularizer_coef`` multiplies the term as well.

    Args:
        score, advantages, batch: read ``logp`` (grad), ``old_logp`` and ``mask``; ``progress`` with ``step_size_end``.
        step_size: ``t > 0`` (the term's weight is ``1/t``).
        step_size_end: ``t`` at the end of training (linear in progress), or None for a constant step size.
    Returns:
        ``[N, T]`` non-negative penalty (0 on padding; grad through ``logp``).
    """
    if not step_size > 0 or (step_size_end is not None and not step_size_end > 0):
        raise ValueError(
            f"step_size and step_size_end must be > 0 (the term's weight is 1/t), got {step_size!r}, {step_size_end!r}"
        )
    mask = valid_mask(score, batch)
    step = step_size
    if step_size_end is not None:
        step += (step_size_end - step_size) * float(batch.require("progress", "mirror_descent_kl with step_size_end"))
    old = batch.require("old_logp", "mirror_descent_kl").detach()
    log_ratio = torch.where(mask > 0, score.logp - old, 0.0).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)  # [N, T]
    return torch.where(mask > 0, kl_to_old_from_old_samples(log_ratio) / step, 0.0)
