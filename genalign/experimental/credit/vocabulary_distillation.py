"""Distillation credit from the teacher's whole next-token distribution (experimental tier), and dense token rewards
from a DPO model's log-ratio to its reference.

The full-distribution teacher pass (:mod:`genalign.teachers.distribution`) gives, at each action, the exact per-token
divergence ``D_t`` between the student's and the teacher's next-token distributions. The gradient of the sequence-level
divergence ``J = E_{o~π_S}[Σ_t D_t(s_t)]`` has two parts: the dependence of ``D_t`` on the student's logits at ``t``
(estimated from the sampled token: ``−δ_t = log π_S(o_t) − log π_T(o_t)`` for the reverse KL, the importance-weighted
``−(π_T/π_S(o_t) − 1)`` for the forward KL) and the dependence of the later states on the action ``o_t`` (a policy
gradient with the reward-to-go ``Σ_{k>t} D_k``). So the advantage of token ``t`` for minimising ``J`` is

    ``R_t = direct_t − λ·Σ_{k>t} D_k``

with the divergences *computed* over the vocabulary rather than sampled: the Rao-Blackwellised form of OPD's
per-token reward-to-go (``opd`` with ``horizon: return`` uses ``Σ_{k>t} −δ_k`` instead, whose expectation is the same
and whose variance is larger).

Rules: :func:`full_distillation` (COPSD [107]), :func:`aligndistil` (AlignDistil [85]), :func:`dpo_token_reward`
(RTO [89]).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.experimental.credit.distillation import _check_mixing, _with_check, reverse_return, teacher_gap

Divergence = Literal["reverse", "forward"]
FULL_NEEDS = ("teacher_action_logp", "teacher_scored", "behaviour_logp", "teacher_vocab_reverse_kl")


def future_sum(values: Tensor) -> Tensor:
    """``[N, T]``: ``Σ_{k > t} v_k`` (strictly after ``t``; padding holds 0)."""
    return reverse_return(values) - values


def divergence_advantage(
    gap: Tensor, divergence: Tensor, scored: Tensor, *, forward: bool, future_weight: float, max_ratio: float,
    weights: Tensor | None = None,
) -> Tensor:  # fmt: skip
    """``[N, T]`` ``R_t = u_t·direct_t − λ·Σ_{k>t} u_k·D_k`` (module docstring), 0 where not ``scored``.

    Args:
        gap: ``[N, T]`` ``δ = log π_T − log π_S`` of the sampled tokens.
        divergence: ``[N, T]`` ``D`` over the vocabulary.
        scored: ``[N, T]`` bool.
        forward: ``direct = clip(e^δ − 1, −1, max_ratio − 1)`` (forward KL) instead of ``δ`` (reverse KL).
        future_weight: ``λ``.
        weights: ``[N, T]`` per-token weights ``u`` (None: 1).
    """
    direct = gap.exp().sub(1.0).clamp(-1.0, max_ratio - 1.0) if forward else gap  # [N, T]
    u = torch.ones_like(gap) if weights is None else weights
    cost = torch.where(scored, u * divergence, 0.0)  # [N, T]
    return torch.where(scored, u * direct - future_weight * future_sum(cost), 0.0)


def _check_full(
    *, coef: float = 1.0, reward_weight: float = 1.0, divergence: str = "reverse", future_weight: float = 1.0,
    max_ratio: float = 5.0, **_,
) -> None:  # fmt: skip
    _check_mixing(coef=coef, reward_weight=reward_weight)
    if divergence not in ("reverse", "forward") or not future_weight >= 0 or not max_ratio > 1:
        raise ValueError(
            f"full_distillation: divergence must be 'reverse' or 'forward', future_weight >= 0 and max_ratio > 1; got "
            f"divergence={divergence!r}, future_weight={future_weight!r}, max_ratio={max_ratio!r}"
        )


@CREDIT_RULES.register(
    "full_distillation",
    needs=(*FULL_NEEDS, "teacher_vocab_forward_kl"),
    bind=_with_check(_check_full, "full_distillation"),
    formula="D_t = KL_V(π_S‖π_T) (reverse) or KL_V(π_T‖π_S) (forward) over the vocabulary; direct_t = δ_t or "
    "clip(e^{δ_t} − 1); A_it = w_r·A_it + c·(direct_t − λ·Σ_{k>t} D_k)",
    source="[107] COPSD (full-distribution token divergence to a privileged self-teacher; its gradient through the "
    "ratio: genalign's reading)",
    summary="On-policy (self-)distillation from the teacher's whole next-token distribution: the exact per-token KL "
    "over the vocabulary as the reward-to-go, the sampled token for its own term.",
)
def full_distillation(
    advantages: Tensor,
    batch: StepBatch,
    *,
    coef: float = 1.0,
    reward_weight: float = 1.0,
    divergence: Divergence = "reverse",
    future_weight: float = 1.0,
    max_ratio: float = 5.0,
) -> Tensor:
    """Crosslingual On-Policy Self-Distillation (COPSD [107]): the student's own rollouts, a teacher (usually the same
    model with privileged context: ``algorithm.teacher: {source: self, weights: current, context: ...}``) and a
    full-distribution token-level divergence.

    ``A_it = w_r·A_it + coef·(direct_it − λ·Σ_{k>t} D_ik)`` (module docstring): ``D`` is
    ``teacher_vocab_reverse_kl`` (``divergence: reverse``, ``direct = δ``) or ``teacher_vocab_forward_kl``
    (``forward``, ``direct = clip(e^δ − 1, −1, max_ratio − 1)``, the importance-weighted forward-KL gradient of
    :func:`~genalign.experimental.credit.distillation.opd`). Samples the teacher did not score keep ``A``.

    Reading chosen: COPSD differentiates the token divergence through the student's logits; genalign's losses see one
    chunk of the student's logits at a time without the teacher's, so the divergence is minimised through the
    ratio as a dense advantage, with the divergences of the later tokens computed exactly over the vocabulary (their
    dependence on ``o_t``) and the sampled token estimating the term of ``t`` itself. ``future_weight`` ``λ = 1`` is
    that gradient; ``λ = 0`` keeps the per-token term only (OPD's ``horizon: token``).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``teacher_action_logp``, ``teacher_scored``, ``behaviour_logp``, ``teacher_vocab_reverse_kl``,
            ``teacher_vocab_forward_kl``, ``mask``.
        coef: ``c >= 0``; reward_weight: ``w_r >= 0``; divergence: ``reverse`` or ``forward``; future_weight:
            ``λ >= 0``; max_ratio: ``> 1``.
    Returns:
        ``[N, T]`` advantages.
    """
    _check_full(coef=coef, reward_weight=reward_weight, divergence=divergence, future_weight=future_weight,
                max_ratio=max_ratio)  # fmt: skip
    rule, device = "credit rule 'full_distillation'", advantages.device
    gap, scored = teacher_gap(batch, rule, device)  # [N, T]
    name = "teacher_vocab_reverse_kl" if divergence == "reverse" else "teacher_vocab_forward_kl"
    values = batch.require(name, rule).to(device).float()  # [N, T]
    dense = divergence_advantage(gap, values, scored, forward=divergence == "forward", future_weight=future_weight,
                                 max_ratio=max_ratio)  # fmt: skip
    return reward_weight * advantages + coef * dense.to(advantages.dtype)


def _check_aligndistil(*, coef: float = 1.0, reward_weight: float = 0.0, beta: float = 0.1, future_weight=1.0,
                       **_) -> None:  # fmt: skip
    _check_mixing(coef=coef, reward_weight=reward_weight)
    if not (beta > 0 and future_weight >= 0):
        raise ValueError(f"aligndistil: beta must be > 0 and future_weight >= 0, got {beta!r}, {future_weight!r}")


@CREDIT_RULES.register(
    "aligndistil",
    needs=(*FULL_NEEDS, "teacher_extrapolation"),
    bind=_with_check(_check_aligndistil, "aligndistil"),
    formula="s* = s_T + w_t(s_T − s_A), w_t = β₂·Σ_v|π_T − π_A| + 1e-3 (the teacher pass); u_t = β/w_t; "
    "A_it = w_r·A_it + c·(u_t·δ*_t − λ·Σ_{k>t} u_k·KL_V(π_S‖π*)_k), δ* = logπ*(o_t) − logπ_S(o_t)",
    source="[85] AlignDistil (token-adaptive logit extrapolation of a DPO model from its reference or reverse-DPO "
    "model; the distillation through the ratio: genalign's reading)",
    summary="Token-level alignment as distillation from a synthetic teacher: a DPO model's logits extrapolated away "
    "from its anchor, token by token, each token's divergence weighted by β/w_t.",
)
def aligndistil(
    advantages: Tensor,
    batch: StepBatch,
    *,
    coef: float = 1.0,
    reward_weight: float = 0.0,
    beta: float = 0.1,
    future_weight: float = 1.0,
) -> Tensor:
    """AlignDistil [85]: the RLHF objective with the DPO model's reward is a token-level distillation from the
    distribution whose logits combine the DPO model's and the reference's. The teacher is configured as that
    distribution: ``algorithm.teacher: {source: model, model: DPO_MODEL, distribution: {anchor: reference (or a
    reverse-DPO model, the contrastive reward), extrapolation: β₂}}`` (:mod:`genalign.teachers.distribution`: logits
    ``s_T + w_t (s_T − s_A)``, ``w_t = β₂·Σ_v |π_T − π_A| + 10⁻³``, the published code's token-adaptive weight).

    Each token's divergence is weighted ``u_t = β / w_t`` (the published loss ``β/w_t · KL(π_S ‖ π*)_t``) and turned
    into an advantage as in :func:`full_distillation`: ``A_it = w_r·A_it + coef·(u_t·δ*_t − λ·Σ_{k>t} u_k·D_k)`` with
    ``δ*`` the gap to the synthetic teacher's log-prob of the sampled token and ``D = KL_V(π_S ‖ π*)``.

    Reading chosen: the published method differentiates ``KL(π_S ‖ π*)`` through the student's logits; here it acts
    through the ratio, as in :func:`full_distillation`. ``reward_weight`` defaults to 0 (pure distillation, as the
    paper trains).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``teacher_action_logp`` (of the synthetic teacher), ``teacher_scored``, ``behaviour_logp``,
            ``teacher_vocab_reverse_kl``, ``teacher_extrapolation``, ``mask``.
        coef: ``>= 0``; reward_weight: ``>= 0``; beta: ``β > 0``; future_weight: ``λ >= 0``.
    Returns:
        ``[N, T]`` advantages.
    """
    _check_aligndistil(coef=coef, reward_weight=reward_weight, beta=beta, future_weight=future_weight)
    rule, device = "credit rule 'aligndistil'", advantages.device
    gap, scored = teacher_gap(batch, rule, device)  # [N, T]
    divergence = batch.require("teacher_vocab_reverse_kl", rule).to(device).float()  # [N, T]
    weight = batch.require("teacher_extrapolation", rule).to(device).float()  # [N, T]
    scale = torch.where(scored, beta / weight.clamp_min(1e-12), 0.0)  # [N, T]
    dense = divergence_advantage(gap, divergence, scored, forward=False, future_weight=future_weight, max_ratio=2.0,
                                 weights=scale)  # fmt: skip
    return reward_weight * advantages + coef * dense.to(advantages.dtype)


def _check_rto(*, coef: float = 1.0, reward_weight: float = 1.0, beta: float = 0.1, horizon: str = "return",
               **_) -> None:  # fmt: skip
    _check_mixing(coef=coef, reward_weight=reward_weight)
    if not beta > 0 or horizon not in ("token", "return"):
        raise ValueError(
            f"dpo_token_reward: beta must be > 0 and horizon 'token' or 'return', got {beta!r}, {horizon!r}"
        )


@CREDIT_RULES.register(
    "dpo_token_reward",
    needs=("teacher_action_logp", "teacher_anchor_logp", "teacher_scored"),
    bind=_with_check(_check_rto, "dpo_token_reward"),
    formula="r_t = β·(logπ_dpo(o_t) − logπ_ref(o_t)); R_t = r_t (token) or Σ_{k≥t} r_k (return); "
    "A_it = w_r·A_it + c·R_it",
    source="[89] RTO (DPO's token-wise reward as dense credit; the critic-free reward-to-go: genalign's reading)",
    summary="Dense token rewards from a DPO-trained model's log-ratio to its reference, added to the group-relative "
    "advantage.",
)
def dpo_token_reward(
    advantages: Tensor,
    batch: StepBatch,
    *,
    coef: float = 1.0,
    reward_weight: float = 1.0,
    beta: float = 0.1,
    horizon: Literal["token", "return"] = "return",
) -> Tensor:
    """Reinforced Token Optimization (RTO [89]): a DPO-trained model characterises each token's quality by its
    log-ratio to its reference, ``r_t = β·(log π_dpo(o_t | s_t) − log π_ref(o_t | s_t))``, and PPO then optimises that
    token-wise reward together with the sentence-level one. The DPO model is the teacher and its reference the
    teacher's anchor: ``algorithm.teacher: {source: model, model: DPO_MODEL, distribution: {anchor: reference}}``
    (the policy's reference is usually the DPO model's base, the SFT model; a folder gives another).

    ``A_it = w_r·A_it + coef·R_it``, ``R_it = r_it`` (``horizon: token``) or ``Σ_{k≥t} r_ik`` (``return``: the
    undiscounted reward-to-go PPO's returns hold, without a critic). Samples the teacher did not score keep ``A``.

    Reading chosen: RTO trains a critic with PPO; genalign's group-relative trainer has none, so the token rewards
    enter as their reward-to-go added to the group-relative advantage of the sentence reward (the KL penalty to the
    reference is the configured regulariser's).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``teacher_action_logp``, ``teacher_anchor_logp``, ``teacher_scored``, ``mask``.
        coef: ``>= 0``; reward_weight: ``>= 0``; beta: ``β > 0``; horizon: ``token`` or ``return``.
    Returns:
        ``[N, T]`` advantages.
    """
    _check_rto(coef=coef, reward_weight=reward_weight, beta=beta, horizon=horizon)
    rule, device = "credit rule 'dpo_token_reward'", advantages.device
    dpo = batch.require("teacher_action_logp", rule).to(device).float()  # [N, T]
    reference = batch.require("teacher_anchor_logp", rule).to(device).float()  # [N, T]
    scored = (batch.mask.to(device) > 0) & batch.require("teacher_scored", rule).to(device)[:, None]  # [N, T]
    rewards = torch.where(scored, beta * (dpo - reference), 0.0)  # [N, T]
    dense = rewards if horizon == "token" else reverse_return(rewards)
    return reward_weight * advantages + coef * dense.to(advantages.dtype)
