"""Turn-level uncertainty in the credit of multi-turn rollouts (rules of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`): advantages rescaled by each turn's relative confidence (AEM
[231] at the turn) and turns without exploration progress dropped from the update (T²PO [171], its credit part).

A turn is one model response between two observations (``turn_ids``, :mod:`genalign.algorithms.turns`); its
uncertainty is a mean over its actions, taken once over the rollout batch of the process before it is split into
micro-batches.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.turns import group_turn_stats, per_turn, turn_layout, turn_means
from genalign.experimental.credit.response_level import check_aem_weights


@CREDIT_RULES.register(
    "aem_turns",
    needs=("turn_ids", "behaviour_logp"),
    formula="u_ik = −mean_{t∈turn k} logπ_old(o_it) (the turn's surprisal); ū_{G,k} = mean of u_·k over the group's "
    "samples that reached turn k; w_ik = clamp((ū_{G,k}/u_ik)^γ, w_min, w_max); A_it ← w_ik·A_it for t in turn k",
    source="[231] AEM (response-level entropy modulation, the response being a turn)",
    summary="Entropy-modulated step credit: each turn's advantages rescaled by the turn's confidence relative to the "
    "same turn of the group's other trajectories.",
)
def aem_turns(
    advantages: Tensor,
    batch: StepBatch,
    *,
    power: float = 1.0,
    weight_min: float = 0.5,
    weight_max: float = 2.0,
    eps: float = 1e-6,
) -> Tensor:
    """AEM [231] lifts entropy dynamics from the token to the response, "since in agentic RL the environment is
    affected by a complete response": the entropy drift of an update is ``∝ Σ A·(u − ū)``, the advantage times the
    relative surprisal, and rescaling advantages by the relative confidence ``ū/u`` moves the policy from exploration
    (negatives dominate) to exploitation (positives dominate). The response-level rule is ``aem``; this is its
    per-turn form for multi-turn rollouts, where each turn is a response the environment reacts to.

    Reading chosen: the uncertainty proxy is the turn's length-normalised surprisal under the behaviour policy,
    ``u_ik = −mean_{t∈k} logπ_old(o_t)`` (as in ``aem``); its reference ``ū`` is the mean over the group's samples that
    reached the same turn; ``w = clamp((ū/u)^γ, w_min, w_max)`` multiplies the actions of that turn.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``turn_ids``, ``behaviour_logp`` ``[N, T]``, ``group_ids`` and ``mask``.
        power: ``γ >= 0`` (0 = no rescaling).
        weight_min, weight_max: clamp of the weights, ``0 <= w_min <= 1 <= w_max``.
        eps: floor of the surprisal before dividing, > 0.
    Returns:
        ``[N, T]`` advantages (unchanged on padding and environment tokens).
    """
    check_aem_weights(power, weight_min, weight_max, eps)
    layout = turn_layout(batch, "credit rule 'aem_turns'")
    logp = (
        batch.require("behaviour_logp", "credit rule 'aem_turns'").detach().to(advantages.device, advantages.dtype)
    )  # [N, T]
    surprisal = (-turn_means(logp, layout.turns, layout.valid, layout.width)).clamp_min(eps)  # [N, K], NaN: absent
    stats, groups = group_turn_stats(surprisal, batch.group_ids)
    weight = (stats.mean[groups.index] / surprisal).pow(power).clamp(weight_min, weight_max)  # [N, K]
    weight = torch.where(layout.present, weight, 1.0)
    return torch.where(layout.valid, advantages * per_turn(weight, layout.turns), advantages)


@CREDIT_RULES.register(
    "turn_progress_gate",
    needs=("turn_ids", "entropy"),
    formula="H̄_ik = mean_{t∈turn k} H_it; Δ_ik = |H̄_ik − H̄_i,k−1| for k ≥ 1; A_it ← κ·A_it for t in a turn with "
    "Δ_ik < τ, unchanged otherwise (the first turn always)",
    source="[171] T²PO (turn-level uncertainty control, credit part only)",
    summary="Turns whose mean entropy barely moves from the previous turn (no exploration progress) are left out of "
    "the update (κ = 0) instead of being resampled.",
)
def turn_progress_gate(advantages: Tensor, batch: StepBatch, *, threshold: float = 0.05, keep: float = 0.0) -> Tensor:
    """T²PO [171] controls exploration at two levels: a token-level "thinking intervention" when the marginal change
    of uncertainty falls below a threshold, and at the turn level the detection of "interactions with negligible
    exploration progress", which it resamples to avoid wasted rollouts.

    Reading chosen: only the credit side is built (both interventions change the rollout). A turn's uncertainty is
    the mean entropy of its actions (``entropy``, from the scoring pass before the update); its progress is the
    absolute change from the sample's previous turn; a turn whose progress is below ``τ`` is a low-information
    interaction and its actions keep ``κ`` of their advantage (``κ = 0``: no gradient, the credit-side counterpart of
    discarding it). The first turn has nothing to compare with and is always kept.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``turn_ids``, ``entropy`` ``[N, T]`` and ``mask``.
        threshold: ``τ >= 0``, in nats.
        keep: ``κ`` in ``[0, 1]``.
    Returns:
        ``[N, T]`` advantages (unchanged on padding and environment tokens).
    """
    if not (threshold >= 0 and 0 <= keep <= 1):
        raise ValueError(f"need threshold >= 0 and keep in [0, 1], got threshold={threshold!r}, keep={keep!r}")
    layout = turn_layout(batch, "credit rule 'turn_progress_gate'")
    entropy = (
        batch.require("entropy", "credit rule 'turn_progress_gate'").detach().to(advantages.device, advantages.dtype)
    )
    mean = turn_means(entropy, layout.turns, layout.valid, layout.width)  # [N, K], NaN: absent
    progress = (mean[:, 1:] - mean[:, :-1]).abs()  # [N, K − 1], NaN where either turn is absent
    stalled = torch.cat([torch.zeros_like(mean[:, :1], dtype=torch.bool), progress < threshold], 1)  # [N, K]
    factor = torch.where(stalled, keep, 1.0).to(advantages.dtype)  # [N, K]
    return torch.where(layout.valid, advantages * per_turn(factor, layout.turns), advantages)
