"""Vocabulary-level top-K candidate update: SimKO [258], as a correction term added to the token ratio objective.

SimKO changes the update at the level of the vocabulary candidates of high-entropy tokens: for verified-correct
responses the gradient is spread from the sampled token to the top-``K`` candidates; for incorrect ones the penalty on
a sampled token that is the top-1 candidate is made stronger. The top-``K`` part needs the log-probs of the ``K`` most
likely tokens *with gradient*, which only a vocabulary term can provide (the detached ``topk`` feature cannot): the
term below is evaluated by the policy inside its chunked log-prob pass.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from genalign.algorithms._validation import expand_advantages
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.regularizers.base import REGULARIZERS, valid_mask
from genalign.algorithms.scores import ScoreOutput

#: a sampled token is the top-1 candidate when its log-prob is within this of the largest one
TOP1_TOLERANCE = 1e-5


def _check(top_k: int, mix_coef: float, entropy_quantile: float, negative_scale: float) -> None:
    if top_k < 1 or not 0 <= mix_coef <= 1 or not 0 <= entropy_quantile <= 1 or not negative_scale >= 1:
        raise ValueError(
            "need top_k >= 1, mix_coef in [0, 1], entropy_quantile in [0, 1] and negative_scale >= 1, got "
            f"{top_k!r}, {mix_coef!r}, {entropy_quantile!r}, {negative_scale!r}"
        )


def topk_candidates_term(
    logits: Tensor,
    *,
    top_k: int = 3,
    mix_coef: float = 0.01,
    entropy_quantile: float = 0.8,
    negative_scale: float = 1.1,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> Tensor:
    """Per-action vocabulary term of :func:`topk_candidates` on one chunk of actions.

    Args:
        logits: ``[n, V]`` next-token logits at the sampling temperature (grad).
        top_k, ...: the regulariser's keywords (only ``top_k`` is used here).
    Returns:
        ``[n]`` whose *value* is the largest log-prob (detached: the top-1 test) and whose *gradient* is that of the mean
        log-prob of the ``K`` most likely tokens (their indices chosen without gradient):
        ``sg(max log π) + mean_K log π − sg(mean_K log π)``.
    """
    _check(top_k, mix_coef, entropy_quantile, negative_scale)
    log_probs = torch.log_softmax(logits.float(), dim=-1)  # [n, V]
    k = min(top_k, log_probs.shape[-1])
    top = log_probs.gather(1, log_probs.detach().topk(k, dim=-1).indices)  # [n, K] (grad)
    mean = top.mean(-1)  # [n]
    return top[:, 0].detach() + mean - mean.detach()


def row_quantile(values: Tensor, valid: Tensor, q: float) -> Tensor:
    """``[N, 1]`` the ``q``-quantile (linear interpolation, as ``torch.quantile``) of each row's valid entries
    (``+inf`` for a row without any, so nothing in it is above)."""
    count = valid.sum(1, keepdim=True)  # [N, 1]
    ordered = torch.where(valid, values, torch.inf).sort(1).values  # [N, T] valid entries first
    spot = q * (count - 1).clamp_min(0).to(values.dtype)  # [N, 1]
    low = spot.floor().long().clamp_max(values.shape[1] - 1)
    high = spot.ceil().long().clamp_max(values.shape[1] - 1)
    a, b = ordered.gather(1, low), ordered.gather(1, high)
    value = a + (b - a).nan_to_num(0.0) * (spot - low.to(values.dtype))
    return torch.where(count > 0, value, torch.inf)


@REGULARIZERS.register(
    "topk_candidates",
    needs=("vocab_term", "entropy"),
    vocab_term=topk_candidates_term,
    formula="high-H tokens (H > row q_τ); A>0: ratio → (1−α)ρ + (α/K)Σ_k sg(ρ/ρ_k)ρ_k (grad to the top-K "
    "candidates); A<0 ∧ sampled = top-1: A → λ·A; added as L = −Aα(sg ρ·e^{V−sg V} − ρ)·1[unclipped] + "
    "(λ−1)·max(−Aρ, −A·clip(ρ))",
    source="[258] SimKO (published code: compute_policy_loss_simko); differs: correct / incorrect = sign of the "
    "advantage (code: reward = 1 / advantage < 0); exact only with regularizer_coef = 1 and a token ppo objective",
    summary="Simple Pass@K Optimization: at high-entropy tokens, spread the positive update over the top-K "
    "candidates and penalise a wrong top-1 candidate harder, against probability over-concentration.",
)
def topk_candidates(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    top_k: int = 3,
    mix_coef: float = 0.01,
    entropy_quantile: float = 0.8,
    negative_scale: float = 1.1,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> Tensor:
    """SimKO [258] as the difference between its token loss and the token PPO loss; with ``regularizer_coef = 1`` and
    the objective ``clipped_ratio`` (token level, ``ppo`` clip with the same ``eps_low`` / ``eps_high``) the sum is
    SimKO's loss in value and gradient.

    At the tokens of a response whose entropy is above the response's ``τ``-quantile (the published ``tau = 0.8``:
    the top 20 %): for ``A > 0`` the published mixed ratio ``(1 − α)ρ + (α/K)Σ_k sg(ρ/ρ_k)·ρ_k`` equals ``ρ`` in value
    and moves ``α`` of the gradient from the sampled token to the mean log-prob ``V`` of the ``K`` most likely
    candidates; the term ``−A·α·(sg(ρ)·e^{V − sg V} − ρ)`` (value 0) adds exactly that change, where the PPO clip
    leaves the ratio unclipped. For ``A < 0`` at a sampled token that is the top-1 candidate the advantage is scaled by
    ``λ`` (``(λ − 1)`` times the token PPO loss is added). Defaults are the published ones (``K = 3``, ``α = 0.01``,
    ``τ = 0.8``, ``λ = 1.1``, symmetric clip 0.2).

    Where genalign differs from the published code: "correct" and "incorrect" are the sign of the advantage (the code
    tests reward 1 / advantage < 0); ``V``'s candidates are the top-``K`` of the current logits at the sampling
    temperature, as in the code.

    Args:
        score, advantages, batch: read ``logp`` (grad), ``old_logp``, ``mask``, ``advantages``, ``entropy`` and ``vocab`` (the value of
            :func:`topk_candidates_term`, grad).
        top_k: ``K``; mix_coef: ``α``; entropy_quantile: ``τ``; negative_scale: ``λ >= 1``;
        eps_low, eps_high: the objective's PPO clip range (the gradient is gated like the objective's).
    Returns:
        ``[N, T]`` per-action correction (0 on padding and at low-entropy tokens).
    """
    _check(top_k, mix_coef, entropy_quantile, negative_scale)
    if not 0 <= eps_low < 1 or not eps_high >= 0:
        raise ValueError(f"need 0 <= eps_low < 1 and eps_high >= 0, got {eps_low!r}, {eps_high!r}")
    mask = valid_mask(score, batch)
    valid = mask > 0  # [N, T]
    logp = score.logp.float()
    old = batch.require("old_logp", "topk_candidates").detach().float()
    advantages = expand_advantages(advantages, tuple(mask.shape)).detach().float()
    entropy = score.require("entropy", "topk_candidates").detach().float()
    vocab = score.require("vocab_term", "topk_candidates").float()  # [N, T]
    high = valid & (entropy > row_quantile(entropy, valid, entropy_quantile))  # [N, T]
    log_ratio = torch.where(valid, logp - old, 0.0)
    ratio = log_ratio.exp()  # [N, T]
    unclipped = ((advantages > 0) & (log_ratio <= math.log1p(eps_high))) | (
        (advantages < 0) & (log_ratio >= math.log1p(-eps_low))
    )
    spread = ratio.detach() * torch.exp(vocab - vocab.detach()) - ratio  # value 0
    positive = high & (advantages > 0) & unclipped
    top1 = logp.detach() >= vocab.detach() - TOP1_TOLERANCE
    negative = high & (advantages < 0) & top1
    ppo = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - eps_low, 1 + eps_high))
    correction = torch.where(positive, -advantages * mix_coef * spread, 0.0)
    return correction + torch.where(negative, (negative_scale - 1.0) * ppo, 0.0)  # [N, T]
