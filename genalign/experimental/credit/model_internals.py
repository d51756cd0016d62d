"""Token credit from the model's internals: attention entropy (anchors and explorers), attention flow toward the
answer and gradient saliency toward the answer (rules of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`;
experimental tier). The causal-LM family measures the signals at rollout time (:mod:`genalign.policies.lm.internals`)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.signals import declare_signal

declare_signal("attention_entropy", ("N", "T"), "rollout",
               "Entropy of the attention distribution of the position predicting each action, averaged over heads and "
               "layers (low: concentrated contextual support).", source="[272]")  # fmt: skip
declare_signal("answer_attention_flow", ("N", "T"), "rollout",
               "Share of the answer region's representation that flows from each action, by attention rollout "
               "(mass-conserving residual-mixed attention multiplied through the layers).", source="[299]")  # fmt: skip
declare_signal("answer_saliency", ("N", "T"), "rollout",
               "Gradient × activation saliency of each action's input embedding toward the answer tokens' "
               "log-probability.", source="[269]")  # fmt: skip


def mean_one(scores: Tensor, valid: Tensor) -> Tensor:
    """``[N, T]`` ``scores / mean_t scores`` over each row's ``valid`` actions (1 where a row's mean is not positive
    and on padding); ``scores`` ``[N, T]`` non-negative."""
    total = torch.where(valid, scores, 0.0).sum(1, keepdim=True)  # [N, 1]
    mean = total / valid.sum(1, keepdim=True).clamp_min(1)  # [N, 1]
    return torch.where(valid & (mean > 0), scores / mean.clamp_min(1e-30), 1.0)


def row_zscores(values: Tensor, valid: Tensor) -> Tensor:
    """``[N, T]`` each row's values standardised over its valid actions (0 where a row has no spread, and on
    padding)."""
    count = valid.sum(1, keepdim=True).clamp_min(1)  # [N, 1]
    mean = torch.where(valid, values, 0.0).sum(1, keepdim=True) / count
    spread = (torch.where(valid, (values - mean) ** 2, 0.0).sum(1, keepdim=True) / count).sqrt()  # [N, 1]
    return torch.where(valid & (spread > 1e-12), (values - mean) / spread.clamp_min(1e-12), 0.0)


def _signal(batch: StepBatch, name: str, rule: str, like: Tensor) -> tuple[Tensor, Tensor]:
    valid = batch.mask.to(like.device) > 0
    return batch.require(name, f"credit rule {rule!r}").detach().double().to(like.device), valid


def _mixed(advantages: Tensor, weights: Tensor, mix: float) -> Tensor:
    return advantages * ((1.0 - mix) + mix * weights).to(advantages.dtype)  # [N, T]


def _check_mix(rule: str, mix: float) -> None:
    if not 0 <= mix <= 1:
        raise ValueError(f"{rule}: mix={mix!r} must be in [0, 1] (0: plain GRPO)")


@CREDIT_RULES.register(
    "attention_entropy_weights",
    needs=("attention_entropy",),
    formula="z_it = within-response z-score of the attention entropy; b = b_start + (b_end − b_start)·progress; "
    "w_it = mean-1 normalised 1 + b·tanh(z_it); A_it ← A_it·w_it",
    source="[272] attention-entropy anchors and explorers (dynamic entropy-aware soft reweighting)",
    summary="Reweight each response's tokens by their attention entropy, from the low-entropy anchors early in "
    "training towards the high-entropy explorers later.",
)
def attention_entropy_weights(
    advantages: Tensor, batch: StepBatch, *, bias_start: float = -0.5, bias_end: float = 0.5
) -> Tensor:
    """[272]: low-attention-entropy tokens ("anchors", concentrated contextual support) give stable gradients aligned
    with the full update; high-entropy tokens ("explorers") give larger, more volatile gradients that may carry the
    hard-reasoning signal. A dynamic soft reweighting by attention entropy improves over uniform token averaging.

    Reading chosen: within each response the attention entropy is standardised, ``w = 1 + b·tanh(z)`` and normalised
    to mean 1 over the response (its total advantage is kept); the bias ``b`` moves linearly with training progress
    from ``bias_start`` (< 0: anchors first, the stable backbone) to ``bias_end`` (> 0: explorers once training is
    stable). The schedule and its ends are ours.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask``, ``attention_entropy`` ``[N, T]`` and ``progress``.
        bias_start, bias_end: ``b`` at progress 0 and 1, each in ``[-1, 1]`` (weights stay positive).
    Returns:
        ``[N, T]`` reweighted advantages (unchanged on padding).
    """
    if not (-1 <= bias_start <= 1 and -1 <= bias_end <= 1):
        raise ValueError(f"attention_entropy_weights: bias_start={bias_start!r} and bias_end={bias_end!r} must be in "
                         "[-1, 1] (the weights 1 + b·tanh(z) stay >= 0)")  # fmt: skip
    entropy, valid = _signal(batch, "attention_entropy", "attention_entropy_weights", advantages)
    progress = float(batch.require("progress", "attention_entropy_weights"))
    bias = bias_start + (bias_end - bias_start) * progress
    weights = mean_one(1.0 + bias * torch.tanh(row_zscores(entropy, valid)), valid)  # [N, T]
    return _mixed(advantages, weights, 1.0)


@CREDIT_RULES.register(
    "attention_flow_credit",
    needs=("answer_attention_flow",),
    formula="f_it = attention-rollout flow from token t into the answer region; w_it = f_it / mean_t f_it; "
    "A_it ← A_it·((1 − β) + β·w_it)",
    source="[299] FlowTracer (token credit from answer-targeted attention flow)",
    summary="Concentrate each response's advantage on the tokens through which information flows to the answer, "
    "read from the attention maps.",
)
def attention_flow_credit(advantages: Tensor, batch: StepBatch, *, mix: float = 1.0) -> Tensor:
    """FlowTracer [299]: token credit from the global structure of information propagation rather than point-wise
    heuristics: on the attention-induced token DAG, only the influence that reaches the answer region is kept, with
    flow conservation so tokens neither gain nor lose mass through path length, and tokens are scored by their flow
    throughput; these importances shape the token-level learning signal (of either sign: towards or away from correct
    answers).

    Reading chosen: the flow is attention rollout (``answer_attention_flow``: per layer ``½(mean_heads A + I)``,
    rows summing to 1, multiplied through the layers; a token's throughput is the share of the answer positions'
    representation that flows from it), not a max-flow backbone extraction; the importances are normalised to mean 1
    over each response and mixed with uniform weights by ``β``.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask`` and ``answer_attention_flow`` ``[N, T]``.
        mix: ``β`` in ``[0, 1]``.
    Returns:
        ``[N, T]`` reweighted advantages (unchanged on padding).
    """
    _check_mix("attention_flow_credit", mix)
    flow, valid = _signal(batch, "answer_attention_flow", "attention_flow_credit", advantages)
    return _mixed(advantages, mean_one(flow.clamp_min(0.0), valid), mix)


@CREDIT_RULES.register(
    "saliency_weights",
    needs=("answer_saliency",),
    formula="s_it = |Σ_h e_ith ∂logπ(answer)/∂e_ith|; w_it = min(s_it / mean_t s_it, w_max), renormalised to mean 1; "
    "A_it ← A_it·((1 − β) + β·w_it)",
    source="[269] GRAIL (Gradient-Reweighted Advantage)",
    summary="Reweight each response's advantage over its tokens by their gradient-activation saliency toward the "
    "final answer.",
)
def saliency_weights(advantages: Tensor, batch: StepBatch, *, mix: float = 1.0, max_weight: float = 5.0) -> Tensor:
    """GRAIL [269]: instead of broadcasting one sequence-level advantage, place more weight on the tokens that are
    more locally sensitive to the final answer, measured by gradient-activation saliency (``answer_saliency``: the
    gradient of the answer tokens' log-probability with respect to each token's input embedding, times the
    embedding), with no process supervision.

    Reading chosen: saliencies are normalised to mean 1 over each response, capped at ``max_weight`` and
    renormalised (a few tokens cannot take the whole update), then mixed with uniform weights by ``β``; the answer is
    the completion's last ``policy.probes.answer_tokens`` text tokens.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask`` and ``answer_saliency`` ``[N, T]``.
        mix: ``β`` in ``[0, 1]``.
        max_weight: cap of a token's weight, ``>= 1``.
    Returns:
        ``[N, T]`` reweighted advantages (unchanged on padding).
    """
    _check_mix("saliency_weights", mix)
    if not max_weight >= 1:
        raise ValueError(f"saliency_weights: max_weight={max_weight!r} must be >= 1")
    saliency, valid = _signal(batch, "answer_saliency", "saliency_weights", advantages)
    weights = mean_one(mean_one(saliency.clamp_min(0.0), valid).clamp_max(max_weight), valid)  # [N, T]
    return _mixed(advantages, weights, mix)
