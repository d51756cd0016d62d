"""HAEPO [46]: a Plackett-Luce softmax over the group's trajectory log-likelihoods, weighting normalised returns
(experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.objectives.base import OBJECTIVES
from genalign.algorithms.objectives.group_terms import (
    batch_inputs,
    group_logsumexp,
    group_sum,
    on_actions,
    sample_advantages,
)
from genalign.algorithms.scores import ScoreOutput


@OBJECTIVES.register(
    "plackett_luce",
    whole_groups=True,
    aggregation="seq_mean_token_mean",
    formula="L_i = Σ_t logπθ(o_it) (/|o_i| with normalize_by_length); w_i = softmax_{j∈G}(L_j/τ) (Plackett-Luce "
    "top-1 probability); J_G = Σ_{i∈G} w_i·Â_i; loss of sample i = −G·w_i·Â_i (Â: the sample advantages)",
    source="[46] HAEPO (with regularizer mirror_descent_kl for the soft KL to the previous policy, entropy_coef "
    "for the entropy term)",
    summary="Each trajectory is compressed into its cumulative log-likelihood; a softmax over the group's "
    "trajectories weights their normalised returns, and the gradient raises the likelihood of trajectories better "
    "than the current softmax-weighted return.",
)
def plackett_luce(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    temperature: float = 1.0,
    normalize_by_length: bool = False,
) -> tuple[Tensor, dict[str, Tensor]]:
    """History-Aggregated Exploratory Policy Optimization [46]: each trajectory of a group becomes one score, its
    cumulative log-likelihood ``L_i = Σ_t logπθ(o_it)`` (the whole history of its decisions, no per-token ratio); a
    Plackett-Luce (top-1) softmax across the group's trajectories gives weights ``w_i = softmax(L/τ)_i`` that sum to
    1, and the objective is the weighted normalised return ``J_G = Σ_i w_i·Â_i``. Its gradient with respect to ``L_i``
    is ``w_i·(Â_i − J_G)/τ``: a trajectory better than the current weighted return gains likelihood, a worse one
    loses it, in proportion to how likely the policy already finds it. The paper adds an entropy term (``entropy_coef``)
    and a soft KL to a frozen copy of the previous policy (``regularizer: mirror_descent_kl`` with several optimizer
    steps per batch).

    Reading chosen: the abstract gives neither the return normalisation nor the temperature. The normalised return
    ``Â_i`` is the configured estimator's advantage (GRPO's group z-score by default); ``τ = 1``; each sample carries
    ``−G·w_i·Â_i`` (``G`` its group's size), so that with equal likelihoods the gradient with respect to each ``L_i``
    is GRPO-sized (``−(Â_i − mean_G Â)/N``) instead of ``G`` times smaller. ``normalize_by_length`` uses the mean
    log-probability ``L_i/|o_i|`` (sums over long completions make the softmax one-hot).

    Args:
        score: ``logp`` ``[n, T]`` (with grad).
        advantages: ``[n]`` or ``[n, T]`` (averaged over each sample's valid actions).
        batch: ``mask`` and ``group_ids`` (every micro-batch holds whole groups).
        temperature: ``τ > 0`` of the softmax.
        normalize_by_length: score trajectories by their mean instead of their summed log-probability.
    Returns:
        ``(loss [n, T], metrics)``: ``−G·w_i·Â_i`` on every valid action of sample ``i``; metrics
        ``plackett_luce/max_weight`` (mean over groups of the largest weight) and ``plackett_luce/weighted_return``
        (mean ``J_G``).
    """
    if not temperature > 0:
        raise ValueError(f"temperature={temperature!r} must be > 0 (the softmax temperature τ, e.g. 1.0).")
    logp, mask, groups = batch_inputs(score, batch, "plackett_luce")
    adv = sample_advantages(advantages, mask)  # [n] Â_i
    likelihood = torch.where(mask > 0, logp, 0.0).sum(1)  # [n] L_i
    if normalize_by_length:
        likelihood = likelihood / mask.sum(1).clamp_min(1.0)
    present = mask.sum(1) > 0  # [n]; a sample without actions takes no part in the softmax
    scores = likelihood / temperature  # [n]
    log_norm = group_logsumexp(scores, present, groups)[groups.index]  # [n]
    weight = torch.where(present, torch.exp(scores - log_norm), 0.0)  # [n], sums to 1 in each group
    size = groups.sizes.to(logp.dtype)[groups.index]  # [n] G
    loss = on_actions(-size * weight * adv, mask)  # [n, T]
    with torch.no_grad():
        largest = torch.full((groups.num_groups,), 0.0, dtype=logp.dtype, device=logp.device)
        largest = largest.scatter_reduce(0, groups.index, weight.detach(), reduce="amax")  # [G]
        metrics = {
            "plackett_luce/max_weight": largest.mean(),
            "plackett_luce/weighted_return": group_sum(weight.detach() * adv, groups).mean(),
        }
    return loss, metrics
