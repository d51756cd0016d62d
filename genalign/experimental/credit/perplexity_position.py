"""Credit reweighted by the sample's perplexity and the token's position in its sequence, for the entropy plateau of
training (rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`; experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


def perplexity_weights(logp: Tensor, valid: Tensor, coef: float) -> Tensor:
    """``[N]`` sample weights ``u_i = N'·exp(−α·z_i) / Σ_j exp(−α·z_j)`` over the ``N'`` samples with actions, ``z``
    the batch-standardised log-perplexity ``−mean_t logπ(o_it)`` (1 for a sample without actions, and for all when
    the batch has fewer than two or no spread).

    Args:
        logp: ``[N, T]`` log-probs of the sampled tokens; valid: ``[N, T]`` bool; coef: ``α >= 0``.
    """
    count = valid.sum(1)  # [N]
    present = count > 0  # [N]
    log_ppl = -torch.where(valid, logp, 0.0).sum(1) / count.clamp_min(1)  # [N]
    ones = torch.ones_like(log_ppl)
    if int(present.sum()) < 2:
        return ones
    values = log_ppl[present]
    spread = values.std()
    if not spread > 1e-8:
        return ones
    scores = torch.where(present, -coef * (log_ppl - values.mean()) / spread, -torch.inf)  # [N]
    weights = torch.softmax(scores, dim=0) * present.sum()  # [N], mean 1 over the present samples
    return torch.where(present, weights, ones)


@CREDIT_RULES.register(
    "perplexity_position",
    needs=("behaviour_logp",),
    formula="z_i = batch z-score of log PPL_i, PPL_i = exp(−mean_t logπ(o_it)); u_i = softmax_i(−α·z_i)·N; "
    "v_it = 1 + β·(2·(t − ½)/|o_i| − 1); w_it = u_i·v_it once progress ≥ start, else 1; A_it = w_it·A_it",
    source="[180] entropy-performance exchange (perplexity and position reward adjustment)",
    summary="In the entropy plateau, give more credit to low-perplexity samples and to the tokens near the end of "
    "each sequence.",
)
def perplexity_position(
    advantages: Tensor,
    batch: StepBatch,
    *,
    perplexity_coef: float = 0.5,
    position_coef: float = 0.5,
    start: float = 0.0,
) -> Tensor:
    """The two reward adjustments of [180]: in the plateau stage of training, learning efficiency tracks the tokens of
    low-perplexity samples and the tokens at the end of sequences, so both get a larger share of the update.

    * Perplexity: each sample's log-perplexity (from the behaviour log-probs) is standardised over the batch and
      ``u_i = softmax_i(−α·z_i)·N`` (mean 1 over the samples): confident samples weigh more.
    * Position: ``v_it = 1 + β·(2·(t − ½)/|o_i| − 1)`` rises linearly from ``≈ 1 − β`` at the first token to
      ``≈ 1 + β`` at the last and averages exactly 1 along each sequence (``t`` counts its valid actions).

    Reading chosen: the abstract gives the criteria (low perplexity, late position) but not the weighting; both forms
    and their defaults are ours, and the weights multiply the advantage of either sign. The rising/plateau stage
    split is a training-progress threshold ``start`` (weights are 1 before it), not a detector of entropy dynamics.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask``, ``behaviour_logp`` ``[N, T]`` and ``progress`` (with ``start > 0``).
        perplexity_coef: ``α >= 0`` (0 turns the perplexity weight off).
        position_coef: ``β`` in ``[0, 1]`` (0 turns the position weight off).
        start: progress in ``[0, 1]`` from which the weights apply.
    Returns:
        ``[N, T]`` ``advantages · u_i · v_it`` (unchanged on padding).
    """
    if not (perplexity_coef >= 0 and 0 <= position_coef <= 1 and 0 <= start <= 1):
        raise ValueError(
            f"perplexity_position needs perplexity_coef >= 0, 0 <= position_coef <= 1 and 0 <= start <= 1, got "
            f"{perplexity_coef!r}, {position_coef!r}, {start!r}"
        )
    if start > 0 and batch.require("progress", "perplexity_position") < start:
        return advantages
    device = advantages.device
    logp = batch.require("behaviour_logp", "perplexity_position").detach().double().to(device)  # [N, T]
    valid = batch.mask.to(device) > 0  # [N, T]
    sample = perplexity_weights(logp, valid, perplexity_coef)  # [N]
    count = valid.sum(1, keepdim=True).clamp_min(1)  # [N, 1]
    position = torch.cumsum(valid.double(), 1)  # [N, T] 1-based position among the valid actions
    ramp = 1.0 + position_coef * (2.0 * (position - 0.5) / count - 1.0)  # [N, T], mean 1 along each row
    weights = torch.where(valid, sample[:, None] * ramp, 1.0)  # [N, T]
    return advantages * weights.to(advantages.dtype)  # [N, T]
