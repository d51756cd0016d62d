"""Segment-level credit from measurements at the states between reasoning segments (rules of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`).

The rollout's ``segment_ids`` cut each completion into segments (sentences / reasoning steps); state ``k`` is the
prompt followed by the first ``k`` segments (:mod:`genalign.algorithms.structure`). The family measures something at
every state at rollout time, with the weights that sampled the rollout: a Monte-Carlo value (``segment_values``,
SPO-chain [41]) or the model's belief in the reference answer (``answer_probe``, belief probing [194], SPAE [193]).
Segment ``k`` (between states ``k`` and ``k + 1``) gets credit from the change it caused; every action inherits the
credit of its segment.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.signals import declare_signal

#: Channels of the ``answer_probe`` signal (last axis).
ANSWER_LOGP, ANSWER_MEAN_PROB, ANSWER_ENTROPY = 0, 1, 2

declare_signal("segment_values", ("N", "S+1"), "rollout",
               "A Monte-Carlo estimate of the expected reward from each segment state: the mean reward of "
               "continuations sampled from state k; entry S_i is the sample's own reward, state 0 uses the group's "
               "samples (genalign.algorithms.structure: segment states).",
               source="[41] SPO-chain", needs_rewards=True)  # fmt: skip
declare_signal("answer_probe", ("N", "S+1", 3), "rollout",
               "The reference answer teacher-forced after each segment state: channel ANSWER_LOGP its log-probability, "
               "ANSWER_MEAN_PROB the mean probability of its tokens, ANSWER_ENTROPY the mean entropy of the next-token "
               "distributions at its tokens.", source="[194] belief probing, [193] SPAE")  # fmt: skip


def per_segment(values: Tensor, segment_ids: Tensor) -> Tensor:
    """``[N, T]``: the entry of ``values`` ``[N, S]`` of each action's segment (``segment_ids`` ``[N, T]``, clamped to
    ``S − 1``; padding continues the last segment)."""
    index = segment_ids.long().clamp(0, values.shape[1] - 1).to(values.device)
    return values.gather(1, index)  # [N, T]


def _segments(batch: StepBatch, rule: str) -> Tensor:
    return batch.require("segment_ids", f"credit rule {rule!r}").long()


def _answer_probe(batch: StepBatch, rule: str) -> Tensor:
    probe = batch.require("answer_probe", f"credit rule {rule!r}").float()
    if probe.ndim != 3 or probe.shape[0] != batch.mask.shape[0] or probe.shape[2] != 3:
        raise ValueError(f"credit rule {rule!r}: answer_probe must be [N, S + 1, 3], got {tuple(probe.shape)}")
    return probe


@CREDIT_RULES.register(
    "segment_mc",
    needs=("segment_ids", "segment_values", "behaviour_logp"),
    replaces=True,
    formula="V_k = mean reward of continuations sampled from state k (V_0 = group mean, V_S = r_i); "
    "A_it = V_{k+1} − V_k for t in segment k; probability mask: A_it = 0 where π_behaviour(o_t) ≥ ρ",
    source="[41] SPO (SPO-chain; tree form not included)",
    summary="Segment advantages from Monte-Carlo values of the states between segments, given to the segment's "
    "low-probability (cutpoint) tokens.",
)
def segment_mc(
    advantages: Tensor, batch: StepBatch, *, probability_mask: bool = True, cutpoint_prob: float = 0.9
) -> Tensor:
    """SPO-chain [41]: segment-level Monte-Carlo advantages without a critic.

    The value ``V(s_k)`` of segment state ``k`` is the mean reward of continuations the family sampled from it at
    rollout time (``segment_values``); segment ``k`` gets ``A_k = V(s_{k+1}) − V(s_k)``, so the advantages of
    a sample's segments sum to ``r_i − V(s_0)``, its GRPO-style advantage without the std. Probability mask: only the
    segment's *cutpoints*, tokens whose behaviour probability is below ``cutpoint_prob``, carry ``A_k``; the other
    tokens (near-deterministic continuations) get 0.

    Reading chosen: SPO-chain cuts segments at every few cutpoints; genalign's segments are the rollout's text
    segments (``segment_ids``: sentences / lines), because the family must know the states to sample from before any
    rule runs. The cutpoints still decide which tokens carry the advantage. ``V(s_0)`` is the group's mean reward (the
    group's samples are Monte-Carlo rollouts from the prompt), not a separate batch of continuations.

    Args:
        advantages: ``[N, T]`` incoming advantages (replaced).
        batch: reads ``segment_ids`` ``[N, T]``, ``segment_values`` ``[N, S + 1]`` (NaN past a
            sample's last state), ``behaviour_logp`` and ``mask``.
        probability_mask: give ``A_k`` to the cutpoint tokens only.
        cutpoint_prob: ``ρ`` in ``(0, 1]``; a token is a cutpoint when its behaviour probability is below it.
    Returns:
        ``[N, T]`` per-action advantages (0 on padding).
    """
    if not 0 < cutpoint_prob <= 1:
        raise ValueError(f"cutpoint_prob must be in (0, 1], got {cutpoint_prob!r}")
    values = batch.require("segment_values", "credit rule 'segment_mc'").float()  # [N, S + 1]
    gains = (values[:, 1:] - values[:, :-1]).nan_to_num(0.0)  # [N, S]
    result = per_segment(gains.to(advantages.device), _segments(batch, "segment_mc"))  # [N, T]
    keep = batch.mask > 0  # [N, T]
    if probability_mask:
        logp = batch.require("behaviour_logp", "segment_mc").to(result.device)
        keep = keep & (logp.float().exp() < cutpoint_prob)
    return torch.where(keep.to(result.device), result, 0.0).to(advantages.dtype)


@CREDIT_RULES.register(
    "belief_progress",
    needs=("segment_ids", "answer_probe"),
    formula="b_k = P(reference answer | prompt, first k segments, probe text); A_it = A_it + c·(b_{k+1} − b_k) for t "
    "in segment k (log-probabilities with scale=log)",
    source="[194] belief probing at segment boundaries",
    summary="Add each segment's change in the model's probability of the correct answer, probed after every "
    "segment, to its actions' advantages.",
)
def belief_progress(
    advantages: Tensor, batch: StepBatch, *, coef: float = 1.0, scale: Literal["probability", "log"] = "probability"
) -> Tensor:
    """Belief probing [194]: the reference answer is appended at every segment boundary and its conditional probability
    ``b_k`` measured (``answer_probe``, teacher-forced at rollout time); segment ``k``'s progress
    ``b_{k+1} − b_k`` refines the trajectory-level advantage of its actions.

    Reading chosen: the abstract says the segment-wise progress "refines GRPO's trajectory-level feedback" without the
    combination; genalign adds ``coef`` times the progress to each action's advantage (so a segment that moved the
    model towards the answer gains credit in correct and incorrect samples alike, and a segment that wandered after
    the answer was known gains none). ``scale="log"`` uses log-probability differences instead.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``segment_ids``, ``answer_probe`` (channel ``ANSWER_LOGP``) and ``mask``.
        coef: ``c >= 0``.
        scale: ``"probability"`` (differences of ``b``) or ``"log"`` (differences of ``log b``).
    Returns:
        ``[N, T]`` advantages (unchanged on padding).
    """
    if coef < 0:
        raise ValueError(f"coef must be >= 0, got {coef!r}")
    if scale not in ("probability", "log"):
        raise ValueError(f"scale must be 'probability' or 'log', got {scale!r}")
    logp = _answer_probe(batch, "belief_progress")[..., ANSWER_LOGP]  # [N, S + 1]
    belief = logp.exp() if scale == "probability" else logp
    progress = (belief[:, 1:] - belief[:, :-1]).nan_to_num(0.0, posinf=0.0, neginf=0.0)  # [N, S]
    bonus = per_segment(progress.to(advantages.device), _segments(batch, "belief_progress"))  # [N, T]
    return torch.where(batch.mask.to(advantages.device) > 0, advantages + coef * bonus, advantages)


def step_potentials(probe: Tensor) -> Tensor:
    """SPAE [193] step potential ``Φ = 1.5·Acc·Conf + 0.5·Acc − Conf`` ``[N, S + 1]`` of every state, from
    ``answer_probe`` ``[N, S + 1, 3]``: ``Acc`` = mean probability of the reference answer's tokens, ``Conf =
    exp(−mean entropy)`` at those tokens (the combination of the authors' published probe script)."""
    accuracy = probe[..., ANSWER_MEAN_PROB]
    confidence = torch.exp(-probe[..., ANSWER_ENTROPY])
    return 1.5 * accuracy * confidence + 0.5 * accuracy - confidence


@CREDIT_RULES.register(
    "step_potential",
    needs=("segment_ids", "answer_probe"),
    formula="Φ_k = 1.5·Acc_k·Conf_k + 0.5·Acc_k − Conf_k at the state after step k; A_it = A_it·f + ξ·ΔΦ_k, "
    "ΔΦ_k = Φ_k − Φ_{k−1} (0 for the first step); f = 1 − λ (A > 0) or 1 + λ (A < 0) after an earlier step's Φ > τ",
    source="[193] SPAE (probe with the reference answer teacher-forced, not sampled)",
    summary="Step potential from probed correctness and confidence: potential gains add credit, potential drops "
    "blame, and outcome credit is damped once the potential has saturated.",
)
def step_potential(
    advantages: Tensor,
    batch: StepBatch,
    *,
    shaping_coef: float = 0.2,
    saturation: float = 0.9,
    saturation_penalty: float = 0.5,
) -> Tensor:
    """Step Potential Advantage Estimation [193]: ``Â_ij = Â_i·f(Φ) + ξ·g(ΔΦ)``.

    The potential of step ``k`` (segment ``k``) is ``Φ`` of the state after it (:func:`step_potentials`); its
    increment ``ΔΦ_k`` is added (potential difference shaping, ``g`` the identity) and is 0 for the first step, as in
    the authors' probe script. Potential saturation penalty ``f``: once an *earlier* step reached ``Φ > τ`` (the
    answer was found and believed), later steps are redundant checking: positive outcome credit is damped to
    ``(1 − λ)`` and negative credit (a right-to-wrong turn) amplified to ``(1 + λ)``.

    Reduction: SPAE probes by sampling ``N`` short continuations after a trigger prompt and averages; genalign
    teacher-forces the reference answer after ``policy.probes.answer_prefix`` once per state, so ``Acc`` is the
    mean teacher-forced token probability and ``Conf`` uses the entropies along the reference answer. Reading chosen:
    the forms of ``f`` and ``g`` (the abstract names them only) and the defaults ``ξ = 0.2``, ``λ = 0.5``; ``τ = 0.9``
    is the script's saturation threshold.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages (``Â_i`` broadcast for the first rule).
        batch: reads ``segment_ids``, ``answer_probe``, ``sample_advantages`` (sign) and ``mask``.
        shaping_coef: ``ξ >= 0``.
        saturation: ``τ``.
        saturation_penalty: ``λ`` in ``[0, 1]``.
    Returns:
        ``[N, T]`` advantages (unchanged on padding).
    """
    if shaping_coef < 0 or not 0 <= saturation_penalty <= 1:
        raise ValueError(
            f"need shaping_coef >= 0 and saturation_penalty in [0, 1], got {shaping_coef}, {saturation_penalty}"
        )
    potential = step_potentials(_answer_probe(batch, "step_potential"))[:, 1:]  # [N, S] Φ after step k
    delta = torch.cat([torch.zeros_like(potential[:, :1]), potential[:, 1:] - potential[:, :-1]], dim=1)  # [N, S]
    saturated = (potential.nan_to_num(float("-inf")) > saturation).long().cumsum(1)  # [N, S] steps up to k that did
    after = torch.cat([torch.zeros_like(saturated[:, :1]), saturated[:, :-1]], dim=1) > 0  # an EARLIER step saturated
    device = advantages.device
    segments = _segments(batch, "step_potential")
    shaping = per_segment(delta.nan_to_num(0.0).to(device), segments)  # [N, T]
    late = per_segment(after.to(device).float(), segments) > 0  # [N, T]
    sign = torch.sign(batch["sample_advantages"].to(device))[:, None]  # [N, 1]
    factor = torch.where(late, 1.0 - sign * saturation_penalty, 1.0)  # [N, T]
    shaped = advantages * factor + shaping_coef * shaping
    return torch.where(batch.mask.to(device) > 0, shaped, advantages)
