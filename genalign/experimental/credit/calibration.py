"""CAPO [57]: calibration-aware advantages from a logistic AUC surrogate over the group's (correct, incorrect) pairs,
with reference-model noise masking (a rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


def sequence_mean(values: Tensor, valid: Tensor) -> Tensor:
    """``[N, T] -> [N]`` mean over the valid actions (0 for a sample without one)."""
    return torch.where(valid, values, 0.0).sum(1) / valid.sum(1).clamp_min(1)


def pair_weights(
    confidence: Tensor, correct: Tensor, usable: Tensor, group_ids: Tensor, *, temperature: float
) -> Tensor:
    """``[N, N]``: ``w_ij = σ((s_j − s_i)/τ)`` for the pairs of ``i`` correct and ``j`` incorrect, both usable and in one
    group (0 elsewhere): how far the pair is from being ranked right by the confidences ``s`` ``[N]`` (the derivative
    of the logistic surrogate ``log(1 + e^{−(s_i − s_j)/τ})``)."""
    same = group_ids[:, None] == group_ids[None, :]  # [N, N]
    pairs = same & (correct & usable)[:, None] & (~correct & usable)[None, :]
    weights = torch.sigmoid((confidence[None, :] - confidence[:, None]) / temperature)  # [N, N]
    return torch.where(pairs, weights, 0.0)


@CREDIT_RULES.register(
    "auc_calibrated",
    needs=("behaviour_logp", "kl", "rewards"),
    replaces=True,
    formula="s_i = mean_t logπ_old(o_it) (confidence), s̄_i = mean_t (logπ_old − k1) (the reference's); pairs (i "
    "correct, j incorrect) of a group, masked when s̄_j − s̄_i > δ; w_ij = σ((s_j − s_i)/τ); A_i = c_G·Σ_j w_ij, "
    "A_j = −c_G·Σ_i w_ij, c_G = 2/(n_G·√(p_G(1 − p_G)))",
    source="[57] CAPO",
    summary="Uncertainty-aware advantages from a logistic AUC surrogate: a correct answer less confident than the "
    "group's wrong ones, and a wrong answer more confident than the right ones, get the larger updates.",
)
def auc_calibrated(
    advantages: Tensor,
    batch: StepBatch,
    *,
    temperature: float = 1.0,
    noise_margin: float | None = 1.0,
    success_column: int = 0,
    success_threshold: float = 0.5,
) -> Tensor:
    """Calibration-Aware Policy Optimization [57]: GRPO's reward-only advantage is the gradient of a *linear* surrogate
    of the AUC of confidence vs correctness (``φ(t) = −t``), which is not AUC-consistent: it raises accuracy while the
    model's perplexity stops ranking right answers above wrong ones. CAPO uses the logistic surrogate
    ``φ(t) = log(1 + e^{−t})`` over every (correct ``i``, incorrect ``j``) pair of a group, ``t = (s_i − s_j)/τ``
    with ``s`` the response's confidence (mean token log-probability, −log perplexity). Its gradient gives each
    response an uncertainty-aware advantage: ``A_i = c·Σ_j σ((s_j − s_i)/τ)`` for a correct response,
    ``A_j = −c·Σ_i σ((s_j − s_i)/τ)`` for an incorrect one, so mis-ranked pairs (a wrong answer more confident than
    a right one) weigh most and well-separated pairs fade.

    Noise masking: a pair is dropped when the reference model is much more confident in the wrong answer than in the
    right one, ``s̄_j − s̄_i > δ`` (the correct one is likely a lucky guess, or the wrong one near-correct).

    Reading chosen: the abstract names the surrogate and "a noise masking mechanism" only. The confidences are the
    sampler's (``behaviour_logp``) and the reference's per-token log-probabilities (``logπ_old − k1``, the per-action
    KL of the scoring pass before the update, exact when the sampler's weights are the current ones); the pair mask
    with margin ``δ`` and the scale ``c_G = 2/(n_G·√(p_G(1 − p_G)))`` (``n_G`` valid samples, ``p_G`` their
    success rate) are genalign's: with equal confidences and no mask the advantages are exactly GRPO's (population
    std) for 0/1 rewards. ``noise_margin=None`` turns the mask off. A group without both outcomes gets 0, as in GRPO.

    Args:
        advantages: ``[N, T]`` incoming advantages (replaced).
        batch: reads ``behaviour_logp``, ``kl`` (k1), ``rewards`` ``[N, K]``, ``group_ids`` and ``mask``.
        temperature: ``τ > 0`` of the logistic surrogate.
        noise_margin: ``δ`` (nats per token), or None for no noise mask.
        success_column: the raw reward column of the verifier; success_threshold: correct above it.
    Returns:
        ``[N, T]`` per-action advantages (0 on padding).
    """
    if not temperature > 0 or (noise_margin is not None and noise_margin < 0):
        raise ValueError(f"auc_calibrated: need temperature > 0 and noise_margin >= 0 or null; got {temperature!r}, "
                         f"{noise_margin!r}.")  # fmt: skip
    table = batch.require("rewards", "credit rule 'auc_calibrated'").to(advantages.device)  # [N, K]
    if not -table.shape[1] <= success_column < table.shape[1]:
        raise ValueError(f"auc_calibrated: success_column={success_column} is not one of the {table.shape[1]} "
                         "rewards (0-based).")  # fmt: skip
    valid = batch.mask.to(advantages.device) > 0  # [N, T]
    logp = batch.require("behaviour_logp", "credit rule 'auc_calibrated'").to(advantages.device).double()
    kl = batch.require("kl", "credit rule 'auc_calibrated'").to(advantages.device).detach().double()
    confidence, reference = sequence_mean(logp, valid), sequence_mean(logp - kl, valid)  # [N], [N]
    column = table[:, success_column].double()
    usable = ~torch.isnan(column) & valid.any(1)  # [N]
    correct = usable & (column > success_threshold)
    group_ids = batch.group_ids.to(advantages.device)
    weights = pair_weights(confidence, correct, usable, group_ids, temperature=temperature)  # [N, N]
    if noise_margin is not None:
        weights = torch.where(reference[None, :] - reference[:, None] > noise_margin, 0.0, weights)
    same = group_ids[:, None] == group_ids[None, :]
    n = (same & usable[None, :]).sum(1).double()  # [N] valid samples of each sample's group
    p = (same & correct[None, :]).sum(1).double() / n.clamp_min(1.0)  # [N]
    scale = torch.where((p > 0) & (p < 1), 2.0 / (n * (p * (1.0 - p)).clamp_min(1e-12).sqrt()), 0.0)  # [N] c_G
    per_sample = scale * (weights.sum(1) - weights.sum(0))  # [N]: rows = as the correct one, columns = as the wrong
    per_sample = torch.where(usable, per_sample, 0.0).to(advantages.dtype)
    return torch.where(valid, per_sample[:, None], 0.0)  # [N, T]
