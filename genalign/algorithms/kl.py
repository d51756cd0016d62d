"""KL estimators against a reference policy (registry :data:`KL_ESTIMATORS`) and the two KL placements (formulas.md §4).

KL estimators take the log-probs of the sampled actions under the current policy (``logp``) and under the reference
(``ref_logp``), both ``[N, T]``, with ``δ = ref_logp − logp``:

* ``k1 = −δ`` (unbiased, can be negative), ``k2 = δ²/2``, ``k3 = exp(δ) − δ − 1`` (non-negative, low variance).

Placement "in the loss": add ``coef · kl_penalty(...)`` to the per-action policy loss and aggregate it with the same
mode. Placement "in the reward": subtract ``coef · Σ_t k(...)`` from the reward before the advantages
(:func:`kl_in_reward`, with :func:`sequence_kl` for the sum).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms._validation import check_float_tensor, check_mask, check_shape
from genalign.registry import Registry

KLEstimator = Callable[[Tensor, Tensor], Tensor]

#: name -> ``fn(logp [N, T], ref_logp [N, T]) -> kl [N, T]``
KL_ESTIMATORS: Registry[KLEstimator] = Registry("KL estimator")


@KL_ESTIMATORS.register(
    "k1",
    formula="δ = logπ_ref − logπθ; k1 = −δ",
    source="formulas.md §4",
    summary="Plain log-ratio; unbiased for KL(πθ‖π_ref) but can be negative per sample.",
)
def kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``k1 = logp - ref_logp`` ``[N, T]`` (formulas.md §4)."""
    return logp - ref_logp  # [N, T]


@KL_ESTIMATORS.register(
    "k2",
    formula="k2 = δ² / 2",
    source="formulas.md §4",
    summary="Squared log-ratio; non-negative, biased, low variance.",
)
def kl_k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``k2 = (ref_logp - logp)^2 / 2`` ``[N, T]`` (formulas.md §4)."""
    return 0.5 * (ref_logp - logp).square()  # [N, T]


@KL_ESTIMATORS.register(
    "k3",
    formula="k3 = exp(δ) − δ − 1",
    source="formulas.md §4",
    summary="Unbiased and non-negative estimator of KL(πθ‖π_ref).",
)
def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``k3 = exp(δ) - δ - 1`` with ``δ = ref_logp - logp`` ``[N, T]`` (formulas.md §4); ``>= 0``.

    Computed as ``expm1(δ) - δ`` for accuracy near ``δ = 0``. Not clamped: a ``δ`` above ~88 overflows float32.
    """
    delta = ref_logp - logp  # [N, T]
    return torch.expm1(delta) - delta  # [N, T]


def kl_penalty(logp: Tensor, ref_logp: Tensor, estimator: str = "k3") -> Tensor:
    """Per-action KL estimate ``[N, T]`` of the current policy to the reference.

    Args:
        logp: ``[N, T]`` log-probs of the sampled actions under the current policy (with grad).
        ref_logp: ``[N, T]`` log-probs under the reference policy (detached).
        estimator: ``"k1"``, ``"k2"`` or ``"k3"``.
    """
    logp = check_float_tensor(logp, "logp", "[N, T]")
    if logp.ndim != 2:
        raise ValueError(f"logp must have shape [N, T], got {list(logp.shape)}")
    ref_logp = check_shape(ref_logp, "ref_logp", tuple(logp.shape), "[N, T]")
    return KL_ESTIMATORS.get(estimator)(logp, ref_logp)


def importance_weighted_kl(
    kl: Tensor, logp: Tensor, old_logp: Tensor, mask: Tensor, *, level: Literal["token", "sequence"] = "token"
) -> Tensor:
    """The per-action KL term multiplied by the importance ratio ``πθ / π_old`` (bias correction for off-policy
    minibatches): ``kl_t · ρ_t`` with ``ρ_t = exp(logπθ − logπ_old)`` (``level="token"``) or the sequence ratio
    ``exp(mean_t (logπθ − logπ_old))`` broadcast to every action (``level="sequence"``).

    This is TRL's ``use_bias_correction_kl`` (TRL 1.16, default on; ``trl/trainer/grpo_trainer.py`` lines 3095-3105:
    ``per_token_kl = per_token_kl * coef_1`` with ``coef_1 = exp(log_importance_weights)`` at its
    ``importance_sampling_level``). The ratio is differentiable, so the KL gradient changes even on-policy, where its
    value is exactly 1: ``∇(k·ρ) = ∇k + k·∇logπθ``. With the correction off, genalign's ``k3`` term equals TRL's.

    Args:
        kl: ``[N, T]`` per-action KL estimate (with grad), e.g. ``ScoreOutput.kl``.
        logp: ``[N, T]`` current log-probs (with grad).
        old_logp: ``[N, T]`` log-probs of the policy that sampled the batch (constant).
        mask: ``[N, T]`` 1 where an action is trained; padding gets ratio 1 and is 0 in the result.
        level: ``"token"`` or ``"sequence"`` ratio.
    Returns:
        ``[N, T]`` ``kl · ρ`` (0 on padding).
    """
    if level not in ("token", "sequence"):
        raise ValueError(f"level must be 'token' or 'sequence' (the importance ratio of the KL term), got {level!r}")
    kl = check_float_tensor(kl, "kl", "[N, T]")
    mask = check_mask(mask, tuple(kl.shape), kl.dtype)
    valid = mask > 0
    log_ratio = torch.where(valid, logp - check_shape(old_logp, "old_logp", tuple(kl.shape), "[N, T]").detach(), 0.0)
    if level == "sequence":
        log_ratio = ((log_ratio * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp_min(1.0)).expand_as(kl)
    return torch.where(valid, kl * log_ratio.exp(), 0.0)  # [N, T]


def sequence_kl(kl: Tensor, mask: Tensor) -> Tensor:
    """Sum of a per-action KL ``[N, T]`` over the valid actions of each sequence -> ``[N]`` (for :func:`kl_in_reward`)."""
    kl = check_float_tensor(kl, "kl", "[N, T]")
    if kl.ndim != 2:
        raise ValueError(f"kl must have shape [N, T], got {list(kl.shape)}")
    mask = check_mask(mask, tuple(kl.shape), kl.dtype)
    return torch.where(mask > 0, kl * mask, 0.0).sum(1)  # [N]


def kl_in_reward(rewards: Tensor, kl_per_sample: Tensor, coef: float) -> Tensor:
    """The "subtract from the reward" placement: ``r_i − coef · KL_i`` ``[N]``; missing rewards stay NaN.

    Args:
        rewards: ``[N]`` rewards; NaN = missing.
        kl_per_sample: ``[N]`` detached KL of each sample (e.g. :func:`sequence_kl` of ``k1``).
        coef: KL coefficient ``β >= 0``.
    """
    rewards = check_float_tensor(rewards, "rewards", "[N]")
    if rewards.ndim != 1:
        raise ValueError(f"rewards must have shape [N], got {list(rewards.shape)}")
    kl_per_sample = check_shape(kl_per_sample, "kl_per_sample", tuple(rewards.shape), "[N]")
    if not coef >= 0:
        raise ValueError(f"coef must be >= 0, got {coef!r}")
    return rewards - coef * kl_per_sample.detach()  # [N]
