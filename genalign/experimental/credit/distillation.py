"""On-policy distillation as per-action credit (experimental tier): a teacher's judgement of each sampled token,
turned into a dense per-token advantage and mixed with the group-relative one.

Every rule reads the teacher signals of ``algorithm.teacher`` (:mod:`genalign.teachers`) and the sampler's log-probs
``behaviour_logp`` (the student's log-prob of the token it sampled, at the sampling temperature). With
``δ_t = log π_T(o_t | ·) − log π_S(o_t | ·)``, the per-token reverse KL estimated on the student's own sample is
``−δ_t``: reverse-KL on-policy distillation ([93]: student prefixes with token-level reverse KL, a policy gradient
with the dense reward ``δ``; [13], [88]) gives token ``t`` the advantage ``δ_t``, constant (detached), through the
configured objective (the ratio and clip of GRPO). Samples the teacher did not score (``teacher_scored`` False: a
remote teacher failed on them) get no teacher term and keep their incoming advantage.

Rules: :func:`opd` (reverse KL, forward-KL warm-up or mixing, weight schedule, sample selection), :func:`routed_distillation`
(SRPO [262]), :func:`contrastive_distillation` (RLCSD [135]), :func:`gated_distillation` (SDAR [226]).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.credit.shaping import success_mask

Samples = Literal["all", "correct", "failed"]
TEACHER_NEEDS = ("teacher_action_logp", "teacher_scored", "behaviour_logp")


def teacher_gap(batch: StepBatch, rule: str, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(δ, scored)``: ``δ = log π_teacher − log π_behaviour`` ``[N, T]`` float32 (0 where not scored or padding)
    and ``scored`` ``[N, T]`` bool (a valid action of a sample the teacher scored)."""
    teacher = batch.require("teacher_action_logp", rule).to(device).float()  # [N, T]
    student = batch.require("behaviour_logp", rule).detach().to(device).float()  # [N, T]
    scored = (batch.mask.to(device) > 0) & batch.require("teacher_scored", rule).to(device)[:, None]  # [N, T]
    return torch.where(scored, teacher - student, 0.0), scored


def selected_samples(
    batch: StepBatch, samples: Samples, column: int, threshold: float, rule: str, device: torch.device
) -> Tensor:
    """``[N, 1]`` bool: the samples a rule applies to: all, those whose reward in ``column`` exceeds ``threshold``
    (correct), or the others (failed; a missing reward counts as failed)."""
    if samples == "all":
        return torch.ones(batch.mask.shape[0], 1, dtype=torch.bool, device=device)
    correct, _ = success_mask(batch, column, threshold, rule)
    return (correct if samples == "correct" else ~correct).to(device)[:, None]


def reverse_return(gap: Tensor) -> Tensor:
    """``[N, T]``: ``Σ_{k >= t} δ_k``, the reward-to-go of the per-token log-ratios (0 on padding adds nothing)."""
    return gap.flip(1).cumsum(1).flip(1)


def _with_check(check: Callable[..., None], name: str) -> Callable[..., Callable[..., Tensor]]:
    """A registry ``bind`` for rule ``name``: the hyper-parameters' values checked at config load, then bound."""

    def bind(**hp) -> Callable[..., Tensor]:
        check(**hp)
        return functools.partial(CREDIT_RULES.get(name), **hp)

    return bind


def _check_mixing(*, coef: float = 1.0, reward_weight: float = 1.0, **_) -> None:
    if not (coef >= 0 and reward_weight >= 0):
        raise ValueError(f"coef and reward_weight must be >= 0, got coef={coef!r}, reward_weight={reward_weight!r}")


def _check_opd(
    *, coef: float = 1.0, coef_end: float | None = None, reward_weight: float = 1.0, horizon: str = "token",
    forward_weight: float = 0.0, forward_until: float = 0.0, max_ratio: float = 5.0, samples: str = "all", **_,
) -> None:  # fmt: skip
    _check_mixing(coef=coef, reward_weight=reward_weight)
    problems = [
        (coef_end is None or coef_end >= 0, f"coef_end={coef_end!r} must be >= 0 or null (no schedule)"),
        (horizon in ("token", "return"), f"horizon={horizon!r} must be 'token' or 'return'"),
        (0 <= forward_weight <= 1, f"forward_weight={forward_weight!r} must be in [0, 1]"),
        (0 <= forward_until <= 1, f"forward_until={forward_until!r} must be a fraction of training in [0, 1]"),
        (max_ratio > 1, f"max_ratio={max_ratio!r} must be > 1 (the clip of π_T/π_S in the forward term)"),
        (samples in ("all", "correct", "failed"), f"samples={samples!r} must be 'all', 'correct' or 'failed'"),
    ]
    for ok, message in problems:
        if not ok:
            raise ValueError(f"opd: {message}")


@CREDIT_RULES.register(
    "opd",
    needs=(*TEACHER_NEEDS, "progress", "rewards"),
    bind=_with_check(_check_opd, "opd"),
    formula="δ_t = logπ_T(o_t) − logπ_S(o_t); R_t = δ_t (token) or Σ_{k≥t} δ_k (return); F_t = clip(e^{δ_t} − 1, −1, "
    "r_max − 1); α = 1 while p < forward_until else forward_weight; c = coef + (coef_end − coef)·p; "
    "A_it = w_r·A_it + c·s_i·[(1 − α)·R_t + α·F_t]",
    source="[88] dense bridge (forward-KL warm-up → OPD, reward-density mixing), [93] (reverse KL = dense log-ratio "
    "reward; KL mixing), [13] VLA-OPD (reverse KL), [131] (OPSD on correct samples)",
    summary="On-policy distillation: the teacher's per-token log-ratio to the student as a dense advantage, mixed "
    "with the group-relative one by a weight or a schedule, with an optional forward-KL warm-up.",
)
def opd(
    advantages: Tensor,
    batch: StepBatch,
    *,
    coef: float = 1.0,
    coef_end: float | None = None,
    reward_weight: float = 1.0,
    horizon: Literal["token", "return"] = "token",
    forward_weight: float = 0.0,
    forward_until: float = 0.0,
    max_ratio: float = 5.0,
    samples: Samples = "all",
    success_column: int = 0,
    success_threshold: float = 0.0,
) -> Tensor:
    """On-policy distillation as a per-token advantage, mixed with the group-relative one ([88], [93], [13], [131]).

    ``A_it = w_r·A_it + c(p)·s_i·[(1 − α(p))·R_it + α(p)·F_it]`` where, with ``δ_t = log π_T(o_t) − log π_S(o_t)``
    (:func:`teacher_gap`):

    * ``R_it = δ_it`` (``horizon: token``: the per-token reverse KL of OPD, the dense reward of [93]) or
      ``Σ_{k >= t} δ_ik`` (``horizon: return``: the reward-to-go, the exact policy gradient of the sequence-level
      reverse KL, [93]'s decomposition with no discount);
    * ``F_it = clip(e^{δ_it} − 1, −1, max_ratio − 1)``: the forward KL ``KL(π_T ‖ π_S)`` at the student's prefix,
      estimated from the student's own token by importance weighting (``∇ Σ_v π_T(v) log π_S(v) = E_{v~π_S}[π_T(v)/
      π_S(v) ∇log π_S(v)]``, with the baseline 1 since ``E_{π_S}[∇log π_S] = 0``), clipped;
    * ``α(p) = 1`` while the training progress ``p < forward_until`` (the forward-KL warm-up of [88] / [72]), then
      ``forward_weight`` (the KL mixing of [93]; 0: pure reverse KL);
    * ``c(p) = coef + (coef_end − coef)·p`` (a linear schedule over training; ``coef_end`` null: constant), the
      weight of the dense term against the group-relative advantage's ``w_r = reward_weight`` ([88]'s reward-density
      allocation: ``reward_weight 0`` is pure OPD, a falling ``c`` hands over to GRPO);
    * ``s_i``: the samples it applies to: ``all``, ``correct`` (reward in ``success_column`` above
      ``success_threshold``: [131]'s OPSD as compression on correct rollouts) or ``failed``; the teacher must have
      scored the sample.

    Reading chosen: [88] and [72] warm up with forward KL on *teacher* rollouts (the student imitates the teacher's
    samples); genalign's samples are the student's, so the warm-up here is the importance-weighted forward KL at the
    student's prefixes (the on-policy forward quadrant of [93]), and the advantages are mixed additively with a
    weight and a linear schedule (the abstracts name the mixing, not its form). ``horizon: token`` matches the OPD
    recipe of per-token reverse KL with no discount.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages (the group-relative ones for the first rule).
        batch: reads ``teacher_action_logp``, ``teacher_scored``, ``behaviour_logp``, ``mask``, ``progress`` (and
            ``rewards`` when ``samples`` is not ``all``).
        coef, coef_end: ``c >= 0`` at the start and at the end of training.
        reward_weight: ``w_r >= 0``.
        horizon: ``token`` or ``return``.
        forward_weight: ``α`` after the warm-up, in ``[0, 1]``; forward_until: warm-up length as a fraction of
            training, in ``[0, 1]``.
        max_ratio: ``> 1``, the clip of ``π_T/π_S`` in ``F``.
        samples, success_column, success_threshold: which samples get the dense term.
    Returns:
        ``[N, T]`` advantages.
    """
    _check_opd(coef=coef, coef_end=coef_end, reward_weight=reward_weight, horizon=horizon,
               forward_weight=forward_weight, forward_until=forward_until, max_ratio=max_ratio, samples=samples)  # fmt: skip
    device = advantages.device
    gap, scored = teacher_gap(batch, "credit rule 'opd'", device)  # [N, T]
    progress = float(batch.require("progress", "credit rule 'opd'"))
    alpha = 1.0 if progress < forward_until else forward_weight
    weight = coef if coef_end is None else coef + (coef_end - coef) * progress
    reverse = gap if horizon == "token" else reverse_return(gap)  # [N, T]
    forward = gap.exp().sub(1.0).clamp(-1.0, max_ratio - 1.0)  # [N, T]
    dense = torch.where(scored, (1.0 - alpha) * reverse + alpha * forward, 0.0)  # [N, T]
    chosen = selected_samples(batch, samples, success_column, success_threshold, "opd", device)  # [N, 1]
    return reward_weight * advantages + weight * torch.where(chosen, dense, 0.0).to(advantages.dtype)


def _check_routed(*, coef: float = 1.0, entropy_temperature: float = 1.0, **_) -> None:
    if not (coef >= 0 and entropy_temperature > 0):
        raise ValueError(
            f"routed_distillation: coef must be >= 0 and entropy_temperature > 0, got {coef!r}, {entropy_temperature!r}"
        )


@CREDIT_RULES.register(
    "routed_distillation",
    needs=(*TEACHER_NEEDS, "teacher_entropy", "rewards"),
    bind=_with_check(_check_routed, "routed_distillation"),
    formula="correct i: A_it unchanged; failed i (scored): A_it = c·w_it·δ_it, w_it = e^{−H^T_it/τ} / "
    "mean_t e^{−H^T_it/τ}, δ = logπ_T − logπ_S",
    source="[262] SRPO (sample routing; entropy-aware weight: genalign's form)",
    summary="Correct samples get GRPO's advantage, failed ones the teacher's per-token correction, weighted towards "
    "tokens where the teacher is confident.",
)
def routed_distillation(
    advantages: Tensor,
    batch: StepBatch,
    *,
    coef: float = 1.0,
    entropy_temperature: float = 1.0,
    success_column: int = 0,
    success_threshold: float = 0.0,
) -> Tensor:
    """Sample-Routed Policy Optimization (SRPO [262]): correct samples keep the group-relative advantage (GRPO's
    reward-aligned reinforcement), failed ones get the teacher's targeted per-token correction instead (SDPO's
    self-distillation), weighted by how sure the teacher is.

    For a failed sample the teacher scored: ``A_it = coef·w_it·δ_it`` with ``δ`` as in :func:`opd` and the
    entropy-aware weight ``w_it = e^{−H^T_it/τ} / mean_{t'} e^{−H^T_it'/τ}`` (``H^T`` the teacher's next-token entropy:
    a high-entropy, unreliable target is suppressed, a confident one emphasised; mean 1 over the sample's actions so
    its total weight stays ``coef``). Correct samples, and failed ones the teacher did not score, keep ``A_it``.

    Reading chosen: the abstract names an entropy-aware dynamic weight; genalign's is the softmax-like ``e^{−H/τ}``
    normalised per sample. "Correct" is the reward in ``success_column`` above ``success_threshold``.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``teacher_action_logp``, ``teacher_scored``, ``teacher_entropy``, ``behaviour_logp``,
            ``rewards``, ``mask``.
        coef: ``>= 0``, the weight of the correction; entropy_temperature: ``τ > 0``.
        success_column, success_threshold: which samples are correct.
    Returns:
        ``[N, T]`` advantages.
    """
    _check_routed(coef=coef, entropy_temperature=entropy_temperature)
    device = advantages.device
    gap, scored = teacher_gap(batch, "credit rule 'routed_distillation'", device)  # [N, T]
    entropy = batch.require("teacher_entropy", "credit rule 'routed_distillation'").to(device).float()  # [N, T]
    confidence = torch.where(scored, torch.exp(-entropy / entropy_temperature), 0.0)  # [N, T]
    mean = confidence.sum(1, keepdim=True) / scored.sum(1, keepdim=True).clamp_min(1)  # [N, 1]
    weights = confidence / mean.clamp_min(1e-12)  # [N, T]
    failed = selected_samples(batch, "failed", success_column, success_threshold, "routed_distillation", device)
    corrected = failed & scored.any(1, keepdim=True)  # [N, 1]
    return torch.where(corrected, (coef * weights * gap).to(advantages.dtype), advantages)


@CREDIT_RULES.register(
    "contrastive_distillation",
    needs=("teacher_action_logp", "teacher_contrast_logp", "teacher_scored"),
    bind=_with_check(_check_mixing, "contrastive_distillation"),
    formula="C_t = logπ_T(o_t | x, hint) − logπ_T(o_t | x, wrong hint) (the student's log-prob cancels); "
    "A_it = w_r·A_it + c·C_it",
    source="[135] RLCSD (contrast of the correct-hint and wrong-hint gaps; additive mixing: genalign's form)",
    summary="Self-distillation signal that keeps only what the correct hint explains beyond any hint's style shift.",
)
def contrastive_distillation(
    advantages: Tensor, batch: StepBatch, *, coef: float = 1.0, reward_weight: float = 1.0
) -> Tensor:
    """Contrastive on-policy self-distillation (RLCSD [135]): the teacher–student gap under the correct hint minus the
    gap under a wrong hint, ``C_t = (log π_T(o_t | x, hint) − log π_S) − (log π_T(o_t | x, wrong hint) − log π_S) =
    log π_T(o_t | x, hint) − log π_T(o_t | x, wrong hint)``: the style shift that any hint induces cancels, the
    tokens that the *correct* hint explains remain. ``A_it = w_r·A_it + coef·C_it`` on the samples the teacher scored.

    Reading chosen: the contrast is added to the group-relative advantage with a weight (RL with a contrastive
    self-distillation term, as the method's name says); the wrong hint is the teacher's ``contrast_context`` (by
    default another prompt's reference answer, :mod:`genalign.teachers.context`).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``teacher_action_logp`` (correct hint), ``teacher_contrast_logp`` (wrong hint),
            ``teacher_scored``, ``mask``.
        coef: ``>= 0``; reward_weight: ``w_r >= 0``.
    Returns:
        ``[N, T]`` advantages.
    """
    _check_mixing(coef=coef, reward_weight=reward_weight)
    device = advantages.device
    rule = "credit rule 'contrastive_distillation'"
    hinted = batch.require("teacher_action_logp", rule).to(device).float()  # [N, T]
    wrong = batch.require("teacher_contrast_logp", rule).to(device).float()  # [N, T]
    scored = (batch.mask.to(device) > 0) & batch.require("teacher_scored", rule).to(device)[:, None]  # [N, T]
    contrast = torch.where(scored, hinted - wrong, 0.0)  # [N, T]
    return reward_weight * advantages + coef * contrast.to(advantages.dtype)


def _check_gated(*, coef: float = 1.0, reward_weight: float = 1.0, temperature: float = 1.0, **_) -> None:
    _check_mixing(coef=coef, reward_weight=reward_weight)
    if not temperature > 0:
        raise ValueError(f"gated_distillation: temperature must be > 0, got {temperature!r}")


@CREDIT_RULES.register(
    "gated_distillation",
    needs=TEACHER_NEEDS,
    bind=_with_check(_check_gated, "gated_distillation"),
    formula="g_t = σ(δ_t/τ), δ = logπ_T − logπ_S; A_it = w_r·A_it + c·g_t·δ_t",
    source="[226] SDAR (sigmoid gate on the detached token gap; its form: genalign's)",
    summary="OPD term gated by a sigmoid of the teacher–student gap: endorsed tokens distilled, rejections softened.",
)
def gated_distillation(
    advantages: Tensor, batch: StepBatch, *, coef: float = 1.0, reward_weight: float = 1.0, temperature: float = 1.0
) -> Tensor:
    """Self-distillation as a gated auxiliary of RL (SDAR [226]): the detached per-token gap ``δ_t`` (as in
    :func:`opd`) goes through a sigmoid gate ``g_t = σ(δ_t/τ)``, so tokens the teacher endorses (``δ > 0``) get most
    of their distillation term and the teacher's rejections (``δ < 0``) are softly attenuated:
    ``A_it = w_r·A_it + coef·g_it·δ_it`` (RL stays the backbone).

    Reading chosen: the gate multiplies the OPD term ``δ`` and is added to the group-relative advantage; ``τ`` sets
    how sharp the gate is.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``teacher_action_logp``, ``teacher_scored``, ``behaviour_logp``, ``mask``.
        coef: ``>= 0``; reward_weight: ``w_r >= 0``; temperature: ``τ > 0``.
    Returns:
        ``[N, T]`` advantages.
    """
    _check_gated(coef=coef, reward_weight=reward_weight, temperature=temperature)
    gap, _ = teacher_gap(batch, "credit rule 'gated_distillation'", advantages.device)  # [N, T]
    gated = torch.sigmoid(gap / temperature) * gap  # [N, T] (0 where δ = 0: padding, unscored)
    return reward_weight * advantages + coef * gated.to(advantages.dtype)
