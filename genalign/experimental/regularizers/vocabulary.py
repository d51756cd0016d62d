"""Regularisers over the whole next-token vocabulary (method catalogue): low-probability regularisation [206] and
distribution entropy [287], as per-token terms evaluated inside the policy's chunked log-prob pass."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from genalign.algorithms._validation import check_float_tensor
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.regularizers.base import REGULARIZERS, valid_mask
from genalign.algorithms.scores import ScoreOutput


def _vocab(score: ScoreOutput, batch: StepBatch, option: str) -> Tensor:
    """The score feature ``vocab_term`` ``[N, T]`` checked against ``logp``, 0 on padding."""
    mask = valid_mask(score, batch)
    vocab = check_float_tensor(score.require("vocab_term", option), "score['vocab_term']", "[N, T]")
    if tuple(vocab.shape) != tuple(mask.shape):
        raise ValueError(f"score['vocab_term'] must have shape [N, T] = {list(mask.shape)}, got {list(vocab.shape)}")
    return torch.where(mask > 0, vocab, 0.0)  # [N, T]


def _scaled_logits(logits: Tensor, option: str) -> Tensor:
    logits = check_float_tensor(logits, f"{option} logits", "[n, V]")
    if logits.ndim != 2:
        raise ValueError(f"{option}: logits must have shape [n, V] (one chunk of actions), got {list(logits.shape)}")
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def _check_noise_ratio(noise_ratio: float) -> None:
    if not 0 <= noise_ratio < 1:
        raise ValueError(f"noise_ratio must be in [0, 1), got {noise_ratio!r}")


def low_probability_term(logits: Tensor, *, noise_ratio: float = 0.02) -> Tensor:
    """Per-action value of :func:`low_probability` [206] on one chunk of actions.

    Args:
        logits: ``[n, V]`` next-token logits of ``n`` actions at the sampling temperature (``z / T``; grad).
        noise_ratio: ``κ`` in ``[0, 1)``.
    Returns:
        ``[n]`` ``KL(q ‖ πθ)``, ``q`` the detached proxy: ``πθ`` without the tokens below ``κ·max πθ``, renormalised.
    """
    _check_noise_ratio(noise_ratio)
    log_probs = torch.log_softmax(_scaled_logits(logits, "low_probability"), dim=-1)  # [n, V]
    with torch.no_grad():
        floor = math.log(noise_ratio) if noise_ratio > 0 else -math.inf
        keep = log_probs >= log_probs.max(-1, keepdim=True).values + floor  # [n, V]
        proxy = torch.log_softmax(log_probs.masked_fill(~keep, -torch.inf), dim=-1)  # [n, V]
    return torch.where(keep, proxy.exp() * (proxy - log_probs), 0.0).sum(-1)  # [n]


@REGULARIZERS.register(
    "low_probability",
    needs=("vocab_term",),
    vocab_term=low_probability_term,
    formula="q = sg(renormalise(π · 1[π ≥ κ·max π])); L_it = KL(q ‖ πθ) over the vocabulary",
    source="[206] Lp-Reg",
    summary="Soft KL toward a proxy policy with presumed-noise tokens filtered out and renormalised.",
)
def low_probability(score: ScoreOutput, advantages: Tensor, batch: StepBatch, *, noise_ratio: float = 0.02) -> Tensor:
    """Low-probability regularisation [206]: the proxy distribution is the current policy with the presumed-noise
    tokens removed and the rest renormalised, which raises the relative probability of low-but-meaningful tokens
    ("reasoning sparks"); a forward KL from the (detached) proxy to the policy keeps them alive.

    Reading chosen: a token is noise when its probability is below ``noise_ratio`` times the most likely token's;
    ``π`` is the policy at the sampling temperature (the law ``logp`` scores). The per-action math is
    :func:`low_probability_term`, evaluated by the policy inside its chunked log-prob pass.

    Args:
        score, advantages, batch: read ``vocab`` ``[N, T]`` (grad; ``policy.score(vocab_term=...)``) and ``mask``.
        noise_ratio: ``κ`` in ``[0, 1)``.
    Returns:
        ``[N, T]`` non-negative loss (0 on padding).
    """
    _check_noise_ratio(noise_ratio)
    return _vocab(score, batch, "low_probability")


def _check_temperature(temperature: float) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")


def distribution_entropy_term(logits: Tensor, *, temperature: float = 1.2) -> Tensor:
    """Per-action value of :func:`distribution_entropy` [287] on one chunk of actions.

    Args:
        logits: ``[n, V]`` next-token logits of ``n`` actions at the sampling temperature (``z / T``; grad).
        temperature: ``τ > 0``; 1 gives 0.
    Returns:
        ``[n]`` ``KL(q ‖ πθ)`` with the detached target ``q = softmax(logits / τ)``.
    """
    _check_temperature(temperature)
    logits = _scaled_logits(logits, "distribution_entropy")
    log_probs = torch.log_softmax(logits, dim=-1)  # [n, V]
    target = torch.log_softmax(logits.detach() / temperature, dim=-1)  # [n, V]
    return (target.exp() * (target - log_probs)).sum(-1)  # [n]


@REGULARIZERS.register(
    "distribution_entropy",
    needs=("vocab_term",),
    vocab_term=distribution_entropy_term,
    formula="q = sg(softmax(z / τ)); L_it = KL(q ‖ πθ) over the vocabulary (τ > 1 raises entropy, τ < 1 lowers it)",
    source="[287] distribution-centric entropy regularisation",
    summary="Entropy control at the distribution level: pull the policy toward its own tempered distribution.",
)
def distribution_entropy(
    score: ScoreOutput, advantages: Tensor, batch: StepBatch, *, temperature: float = 1.2
) -> Tensor:
    """Distribution-level entropy regularisation [287]: instead of a token-entropy bonus, the policy is regularised
    toward a target distribution, here its own tempered copy (fully on-policy, no extra sampling); ``τ`` sets the
    direction and strength of the entropy change.

    Reading chosen: the target ``softmax(z/τ)`` (detached) and the forward KL; the paper's "better" target is not
    specified in the abstract. ``z`` are the logits at the sampling temperature. The per-action math is
    :func:`distribution_entropy_term`, evaluated by the policy inside its chunked log-prob pass.

    Args:
        score, advantages, batch: read ``vocab`` ``[N, T]`` (grad; ``policy.score(vocab_term=...)``) and ``mask``.
        temperature: ``τ > 0``; 1 gives a zero loss.
    Returns:
        ``[N, T]`` non-negative loss (0 on padding).
    """
    _check_temperature(temperature)
    return _vocab(score, batch, "distribution_entropy")
