"""Token credit from the model's own uncertainty (rules of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`):
entropy-gated updates (EGSPO [84]), spurious-token masking (STAPO [185]), confidence-scaled advantages with a
logit-certainty penalty (UCAS [210]) and self-teacher magnitudes with the reward's sign (RLSD [132]).

Features come from the scoring pass before the update (entropy, raw-logit statistics) or from the rollout (behaviour
log-probs, the self-teacher's log-probs); thresholds that depend on the batch are computed once over all valid actions
of the optimisation batch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.signals import declare_signal

#: Channels of the ``logit_stats`` feature (last axis).
SELF_CERTAINTY, RAW_LOGIT = 0, 1

declare_signal("logit_stats", ("N", "T", 2), "score",
               "Raw next-token logit statistics (detached): channel SELF_CERTAINTY is logsumexp(s) - mean_v(s) of the "
               "logits s at the sampling temperature (KL(uniform || p) + log V), channel RAW_LOGIT the raw logit "
               "(before the temperature) of the sampled action.", source="[185] STAPO, [210] UCAS")  # fmt: skip


def batch_quantile(values: Tensor, valid: Tensor, q: float) -> Tensor:
    """The ``q`` quantile of ``values`` over the valid actions (``inf`` if there are none)."""
    picked = values[valid] if values.is_floating_point() else values[valid].float()
    return torch.quantile(picked, q) if picked.numel() else values.new_tensor(float("inf"))


@CREDIT_RULES.register(
    "spurious_tokens",
    needs=("entropy", "behaviour_logp"),
    formula="spurious: A_i > 0 ∧ π_behaviour(o_t) < τ_p ∧ H_t < τ_h (τ_h = quantile_q(H over the batch)); "
    "A_it = 0 for spurious tokens",
    source="[185] STAPO (S2T mask)",
    summary="Silence the rare tokens of correct responses that are both improbable and sampled where the policy was "
    "confident (low probability, low entropy, positive advantage).",
)
def spurious_tokens(
    advantages: Tensor,
    batch: StepBatch,
    *,
    prob_threshold: float = 0.01,
    entropy_quantile: float = 0.05,
    entropy_threshold: float | None = None,
) -> Tensor:
    """Silencing Spurious Tokens (S2T) of STAPO [185]: a token whose sample has a positive advantage, whose behaviour
    probability is below ``τ_p`` and whose local entropy is below ``τ_h`` inherits the full sequence reward although it
    contributes little, and its gradient is abnormally large (gradient norm grows as probability and entropy fall); its
    update is masked (advantage 0).

    Defaults: ``τ_p = 0.01`` and ``τ_h`` the batch's 5th percentile of token entropy (the paper's examples); a fixed
    ``entropy_threshold`` replaces the percentile. Difference: STAPO renormalises the loss over the remaining tokens;
    a credit rule cannot change the aggregation mask, so masked tokens stay in the token-mean denominator (they are
    around 0.01 % of tokens, so the normaliser changes by about that much).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``behaviour_logp``, ``entropy``, ``sample_advantages`` (sign) and ``mask``.
        prob_threshold: ``τ_p`` in ``(0, 1]``.
        entropy_quantile: in ``[0, 1]``, used when ``entropy_threshold`` is None.
        entropy_threshold: a fixed ``τ_h`` (nats).
    Returns:
        ``[N, T]`` advantages with spurious tokens zeroed.
    """
    if not 0 < prob_threshold <= 1 or not 0 <= entropy_quantile <= 1:
        raise ValueError(f"need prob_threshold in (0, 1] and entropy_quantile in [0, 1], got {prob_threshold!r}")
    device = advantages.device
    entropy = batch.require("entropy", "spurious_tokens").detach().to(device)
    probs = batch.require("behaviour_logp", "spurious_tokens").detach().to(device).float().exp()
    valid = batch.mask.to(device) > 0
    gate = batch_quantile(entropy, valid, entropy_quantile) if entropy_threshold is None else entropy_threshold
    positive = (batch["sample_advantages"].to(device) > 0)[:, None]
    spurious = valid & positive & (probs < prob_threshold) & (entropy < gate)
    return torch.where(spurious, 0.0, advantages)


def _group_zscore(values: Tensor, group_ids: Tensor, eps: float) -> Tensor:
    """``(v − mean_G) / (std_G + eps)`` with the unbiased std; a group of one keeps its value (mean 0, std 1, as
    the UCAS implementation does)."""
    groups = group_ids.unique(return_inverse=True)[1].to(values.device)
    size = int(groups.max()) + 1
    count = torch.zeros(size, device=values.device).index_add_(0, groups, torch.ones_like(values))
    mean = torch.zeros(size, device=values.device).index_add_(0, groups, values) / count
    square = torch.zeros(size, device=values.device).index_add_(0, groups, (values - mean[groups]) ** 2)
    std = (square / (count - 1).clamp_min(1)).sqrt()
    single = count[groups] < 2
    return torch.where(single, values, (values - mean[groups]) / (std[groups] + eps))


@CREDIT_RULES.register(
    "uncertainty_shaping",
    needs=("logit_stats",),
    formula="c_i = Σ_t (logsumexp(s_t) − mean_v s_t), c̃_i = group z-score; A'_it = A_it·e^{−β₊c̃_i} (A_it > 0) or "
    "A_it·e^{β₋c̃_i}; ẑ_it = min-max over the batch of the sampled token's raw logit; A_it = A'_it − λ·ẑ_it, "
    "floored at 0 where A'_it > 0",
    source="[210] UCAS (public implementation)",
    summary="Scale each response's advantage by its group-relative self-confidence (novel correct answers gain, "
    "confident errors lose more), then subtract a raw-logit certainty penalty per token.",
)
def uncertainty_shaping(
    advantages: Tensor,
    batch: StepBatch,
    *,
    beta_positive: float = 0.25,
    beta_negative: float = 0.35,
    logit_penalty: float = 0.05,
    eps: float = 1e-6,
) -> Tensor:
    """UnCertainty-aware Advantage Shaping [210].

    Stage 1 (response level): a response's self-confidence is the sum over its tokens of ``logsumexp(s) − mean_v(s)``
    (``KL(uniform ‖ p) + log V``) of the logits ``s`` at the sampling temperature, z-scored within the group (``c̃``);
    a positive advantage is multiplied by ``exp(−β₊ c̃)`` (an unconfident correct response gains), a non-positive one by
    ``exp(β₋ c̃)`` (a confident wrong response is penalised harder). Stage 2 (token level): the raw logit (before the
    temperature) of the sampled token, min-max normalised over the batch's valid tokens (0.5 everywhere if they are
    all equal), is subtracted times ``λ``; where the stage-1 advantage is positive the result is floored at 0, so a
    positive trajectory never flips sign.

    Follows the authors' public implementation and its constants (``β₊ = 0.25``, ``β₋ = 0.35``, ``λ = 0.05``), with the
    incoming per-action advantages in place of the group-normalised outcome (they are equal for the first rule).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``logit_stats`` ``[N, T, 2]`` (scoring pass before the update), ``group_ids`` and ``mask``.
        beta_positive, beta_negative: ``β₊, β₋ >= 0``.
        logit_penalty: ``λ >= 0``.
        eps: added to the group std of the confidences.
    Returns:
        ``[N, T]`` advantages (0 on padding).
    """
    if beta_positive < 0 or beta_negative < 0 or logit_penalty < 0:
        raise ValueError("beta_positive, beta_negative and logit_penalty must be >= 0")
    device = advantages.device
    stats = batch.require("logit_stats", "uncertainty_shaping").detach().to(device).float()  # [N, T, 2]
    valid = batch.mask.to(device) > 0
    confidence = torch.where(valid, stats[..., SELF_CERTAINTY], 0.0).sum(1)  # [N]
    relative = _group_zscore(confidence, batch.group_ids.to(device), eps)[:, None]  # [N, 1]
    modifier = torch.where(advantages > 0, torch.exp(-beta_positive * relative), torch.exp(beta_negative * relative))
    stage1 = advantages * modifier  # [N, T]
    logits = stats[..., RAW_LOGIT]
    if valid.any():
        low, high = logits[valid].min(), logits[valid].max()
        scaled = (logits - low) / (high - low + eps) if not torch.isclose(high, low) else torch.full_like(logits, 0.5)
    else:
        scaled = torch.zeros_like(logits)
    shaped = stage1 - logit_penalty * scaled.to(advantages.dtype)
    shaped = torch.where(stage1 > 0, shaped.clamp_min(0.0), shaped)
    return torch.where(valid, shaped, 0.0)
