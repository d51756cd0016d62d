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
