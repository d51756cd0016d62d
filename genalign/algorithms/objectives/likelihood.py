"""Likelihood-weighted objectives that are not a plain ratio × clip: wd1 and SPG (registered in :data:`OBJECTIVES`).

Both are written for masked diffusion LMs, whose log-likelihood is a proxy (:mod:`genalign.policies.dlm.likelihood`), but they are
pure tensor functions and apply to any family. The math lives in :func:`wd1_loss` and :func:`spg_loss`
(``fn(logp [N, A], old_logp [N, A], advantages [N], mask [N, A], *, group_ids [N], **hp) -> (loss [N, A], metrics)``);
the registered objectives read those inputs from the score output and the step batch (``wd1`` weighs samples
within their group: registry meta ``whole_groups``, every micro-batch must hold whole groups). ``loss`` is per action
and 0 on padding; ``seq_mean_token_sum`` is the natural aggregation for both (one term per sequence).
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import make_groups
from genalign.algorithms._validation import check_float_tensor, check_mask, check_shape
from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.objectives.base import OBJECTIVES
from genalign.algorithms.policy_loss import policy_loss
from genalign.algorithms.scores import ScoreOutput


def _check(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    logp = check_float_tensor(logp, "logp", "[N, A]")
    if logp.ndim != 2:
        raise ValueError(f"logp must have shape [N, A], got {list(logp.shape)}")
    check_shape(old_logp, "old_logp", tuple(logp.shape), "[N, A]")
    advantages = check_shape(advantages, "advantages", (logp.shape[0],), "[N]").detach().to(logp.dtype)
    mask = check_mask(mask, tuple(logp.shape), logp.dtype)
    return logp, advantages, mask


def group_softmax(values: Tensor, group_ids: Tensor) -> Tensor:
    """Softmax of ``values`` ``[N]`` within each group of ``group_ids`` ``[N]`` (weights of a group sum to 1)."""
    groups = make_groups(group_ids, values.shape[0], min_size=1)
    group_max = torch.full((groups.num_groups,), -torch.inf, dtype=values.dtype, device=values.device)
    group_max = group_max.scatter_reduce(0, groups.index, values, reduce="amax")  # [G]
    exp = torch.exp(values - group_max[groups.index])  # [N]
    total = torch.zeros_like(group_max).index_add_(0, groups.index, exp)  # [G]
    return exp / total[groups.index]  # [N]


def wd1_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    group_ids: Tensor,
    temperature: float = 1.0,
    negative_weight: float = 1.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """wd1's ratio-free weighted likelihood (formulas.md §6): no importance ratio, no old-policy likelihood.

    Within each group, ``w⁺ = softmax(A/τ)`` and ``w⁻ = softmax(−A/τ)``; the per-action loss is
    ``−(w⁺_i − λ·w⁻_i) · logp_{i,a}`` on valid actions, so a sequence-level ``logp`` (``A = 1``, e.g. ELBO / length)
    gets exactly one weighted term. A group with equal advantages gets ``w⁺ = w⁻`` and, with ``λ = 1``, no gradient.

    Args:
        logp: ``[N, A]`` sequence (``A = 1``) or per-token log-likelihood estimates (with grad).
        old_logp: ``[N, A]``; unused by wd1 (kept for the common signature), only shape-checked.
        advantages: ``[N]`` group-relative advantages (constants).
        mask: ``[N, A]`` 1 where an action is trained.
        group_ids: ``[N]`` group of each sample.
        temperature: ``τ > 0`` of the group softmax.
        negative_weight: ``λ >= 0``, weight of the push-down term.
    Returns:
        ``(loss [N, A], metrics)`` with ``weight_mean_abs`` (mean ``|w⁺ − λw⁻|``).
    """
    if not temperature > 0:
        raise ValueError(f"temperature={temperature!r} must be > 0 (the group softmax temperature, e.g. 1.0).")
    if not negative_weight >= 0:
        raise ValueError(f"negative_weight={negative_weight!r} must be >= 0 (1.0 weighs push-up and push-down evenly).")
    logp, advantages, mask = _check(logp, old_logp, advantages, mask)
    positive = group_softmax(advantages / temperature, group_ids)  # [N]
    negative = group_softmax(-advantages / temperature, group_ids)  # [N]
    weight = (positive - negative_weight * negative).detach()  # [N]
    valid = mask > 0
    loss = torch.where(valid, -weight[:, None] * logp, 0.0)  # [N, A]
    return loss, {"weight_mean_abs": weight.abs().mean().detach()}


def spg_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    group_ids: Tensor,
    clip: str = "none",
    **clip_hp: float | None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """SPG: maximise the ELBO of positive-advantage samples, minimise an upper bound for negative ones.

    ``logp`` comes from the ``spg`` likelihood proxy: column 0 the ELBO, column 1 the mixed upper bound (both per
    token). Each sample keeps the column that matches the sign of its advantage, and the shared
    :func:`~genalign.algorithms.policy_loss` (token ratio level, clip form ``clip``) is applied to that column; with
    ``clip="none"`` and one update per rollout this is SPG's policy gradient ``−A · ∇bound``.

    Args:
        logp: ``[N, 2]`` (ELBO, mixed upper bound), with grad.
        old_logp: ``[N, 2]`` the same at rollout time.
        advantages: ``[N]``.
        mask: ``[N, 2]``.
        group_ids: ``[N]`` (unused; common signature).
        clip: clip form name for the ratio of the chosen bound; ``clip_hp`` its hyper-parameters.
    Returns:
        ``(loss [N, 2], metrics)``; the column not used by a sample has loss 0.
    """
    del group_ids
    logp, advantages, mask = _check(logp, old_logp, advantages, mask)
    if logp.shape[1] != 2:
        raise ValueError(
            f"spg_loss needs logp of shape [N, 2] (ELBO, upper bound) from the 'spg' likelihood proxy, got "
            f"{list(logp.shape)}; set the policy's likelihood_proxy to 'spg'."
        )
    use_upper = (advantages < 0).to(logp.dtype)  # [N]
    chosen = torch.stack([1 - use_upper, use_upper], dim=1) * mask  # [N, 2]
    loss, metrics = policy_loss(logp, old_logp, advantages, chosen, ratio_level="token", clip=clip, **clip_hp)
    metrics["frac_upper_bound"] = use_upper.mean().detach()
    return loss, metrics


def _inputs(score: ScoreOutput, batch: StepBatch, option: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(logp, old_logp, mask, group_ids)`` of a micro-batch."""
    old_logp = require(batch, "old_logp", f"objective {option!r}")
    mask = require(batch, "mask", f"objective {option!r}")
    return score.logp.float(), old_logp, mask, require(batch, "group_ids", f"objective {option!r}")


@OBJECTIVES.register(
    "wd1",
    whole_groups=True,
    uses_old_logp=False,
    formula="L_i = −(softmax_G(A/τ)_i − λ·softmax_G(−A/τ)_i) · logπθ(o_i)",
    source="wd1 (weighted policy optimisation for diffusion LMs); formulas.md §6",
    summary="Ratio-free: push up likelihood of good samples, down of bad ones, with group-softmax weights.",
)
def wd1(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    temperature: float = 1.0,
    negative_weight: float = 1.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """wd1 (:func:`wd1_loss`) on the micro-batch's log-likelihoods; every micro-batch must hold whole groups."""
    logp, old_logp, mask, group_ids = _inputs(score, batch, "wd1")
    return wd1_loss(
        logp, old_logp, advantages, mask, group_ids=group_ids, temperature=temperature, negative_weight=negative_weight
    )


@OBJECTIVES.register(
    "spg",
    formula="A ≥ 0: −A·ρ(ELBO); A < 0: −A·ρ(ω·EUBO + (1−ω)·ELBO); ρ clipped as chosen",
    source="SPG (Sandwiched Policy Gradient); formulas.md §6",
    summary="Lower bound for positive advantages, upper bound (or its mixture) for negative ones.",
)
def spg(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    clip: str = "none",
    eps_low: float | None = None,
    eps_high: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """SPG (:func:`spg_loss`) on the ``[n, 2]`` bounds of the ``spg`` likelihood proxy."""
    logp, old_logp, mask, group_ids = _inputs(score, batch, "spg")
    bounds = {key: value for key, value in {"eps_low": eps_low, "eps_high": eps_high}.items() if value is not None}
    return spg_loss(logp, old_logp, advantages, mask, group_ids=group_ids, clip=clip, **bounds)
