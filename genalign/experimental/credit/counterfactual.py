"""Token credit from a counterfactual replay: the same response re-scored under a prompt without the criteria it was
judged by (rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`; experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.signals import declare_signal

declare_signal("counterfactual_logp", ("N", "T"), "rollout",
               "Log-probabilities of the sampled actions re-scored by the sampling weights under the row's "
               "counterfactual prompt (policy.probes.counterfactual_column, e.g. the prompt without its rubric), at "
               "the sampling temperature.", source="[275] CoRT")  # fmt: skip


def contrast_weights(contrast: Tensor, valid: Tensor, temperature: float) -> Tensor:
    """``[N, T]`` response-normalised weights ``w_it = s_it / mean_t s_it`` with ``s = σ(c / τ)``; 1 on padding.

    Args:
        contrast: ``[N, T]`` per-token log-likelihood contrast ``c``; valid: ``[N, T]`` bool; temperature: ``τ > 0``.
    """
    bounded = torch.sigmoid(contrast / temperature)  # [N, T] in (0, 1)
    mean = torch.where(valid, bounded, 0.0).sum(1, keepdim=True) / valid.sum(1, keepdim=True).clamp_min(1)  # [N, 1]
    return torch.where(valid, bounded / mean.clamp_min(1e-12), 1.0)  # [N, T], mean 1 over each response


@CREDIT_RULES.register(
    "rubric_contrast",
    needs=("counterfactual_logp", "behaviour_logp"),
    formula="c_it = logπ(o_it | rubric prompt) − logπ(o_it | criteria-free prompt); s_it = σ(c_it/τ); "
    "w_it = s_it / mean_t(s_it); A_it ← A_it·((1 − β) + β·w_it)",
    source="[275] CoRT (counterfactual replay token weights)",
    summary="Redistribute each response's advantage over its tokens by how much the rubric in the prompt raised "
    "their likelihood (the response is re-scored under a prompt without the rubric).",
)
def rubric_contrast(advantages: Tensor, batch: StepBatch, *, temperature: float = 1.0, mix: float = 1.0) -> Tensor:
    """CoRT [275]: rubric-conditioned GRPO broadcasts one response-level advantage to every token although criteria
    are grounded in particular spans. Counterfactual replay re-scores the same sampled response under a matched
    criteria-free prompt (``counterfactual_logp``, measured at rollout time by the sampling weights); the token-wise
    log-likelihood contrast ``c = logπ(o | rubric prompt) − logπ(o | criteria-free prompt)`` measures how much each
    token depends on the rubric. Bounded weights ``s = σ(c/τ)`` are normalised to mean 1 over each response, so the
    signed response advantage is redistributed across its tokens and its total is unchanged; the reward is not
    touched and no auxiliary scorer is trained.

    Reading chosen: the bounding function (a sigmoid of the contrast at temperature ``τ``), the mean-1 normalisation
    and the mix ``β`` with uniform weights are ours. The criteria-free prompt is a data column the config names
    (``policy.probes.counterfactual_column``); the contrast reads the behaviour log-probs for the rubric prompt.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask``, ``behaviour_logp`` and ``counterfactual_logp`` ``[N, T]``.
        temperature: ``τ > 0``.
        mix: ``β`` in ``[0, 1]`` (0: uniform weights, plain GRPO).
    Returns:
        ``[N, T]`` ``advantages · ((1 − β) + β·w)`` (unchanged on padding).
    """
    if not (temperature > 0 and 0 <= mix <= 1):
        raise ValueError(f"rubric_contrast needs temperature > 0 and 0 <= mix <= 1, got {temperature!r}, {mix!r}")
    device = advantages.device
    rubric = batch.require("behaviour_logp", "rubric_contrast").detach().double().to(device)  # [N, T]
    without = batch.require("counterfactual_logp", "credit rule 'rubric_contrast'").detach().double().to(device)
    valid = batch.mask.to(device) > 0  # [N, T]
    contrast = torch.where(valid, rubric - without, 0.0)  # [N, T]
    weights = (1.0 - mix) + mix * contrast_weights(contrast, valid, temperature)  # [N, T]
    return advantages * weights.to(advantages.dtype)  # [N, T]
