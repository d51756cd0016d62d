"""Token credit from a token judge: the spans a claim checker, a step critic, a quality estimator or a language
identifier marks in a completion become token-level rewards, step penalties or localized suppression (rules of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`; experimental tier).

The judge is configured on the policy (``policy.probes.token_judge``, :mod:`genalign.rewards.token_judges`: a
registry of swappable judges with rule-based defaults) and its verdict reaches the rules as the ``token_judgement``
signal: the value of every action's token, 0 where nothing was judged, negative on an error (its magnitude the
severity)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.signals import declare_signal

declare_signal("token_judgement", ("N", "T"), "rollout",
               "The configured token judge's value of each action's token (policy.probes.token_judge): 0 where "
               "nothing was judged, negative on an error (its magnitude the severity), combined over the judge's "
               "votes.", source="[105] [155] [169] [205] [224] [247]")  # fmt: skip


def _judgement(batch: StepBatch, rule: str, like: Tensor) -> tuple[Tensor, Tensor]:
    """``(judgement, valid)`` ``[N, T]``: the judge's values (0 on padding) and the real actions."""
    valid = batch.mask.to(like.device) > 0
    judged = batch.require("token_judgement", f"credit rule {rule!r}").detach().to(like)  # [N, T]
    return torch.where(valid, judged, 0.0), valid


@CREDIT_RULES.register(
    "judged_token_rewards",
    needs=("token_judgement",),
    formula="j_it = the token judge's value of token t (0 unjudged, < 0 an error of that severity); "
    "A_it ← A_it + w·j_it",
    source="[155] Perceval (penalties on hallucinated spans); [205] CAPO (step critiques by vote as token rewards); "
    "[224] fine-grained token-level rewards from an error-span quality estimator with severities; [247] RED "
    "(a sequence reward redistributed over prefixes)",
    summary="Token-level rewards from a token judge (claim checker, step critic, error-span quality estimator) added "
    "to the sequence advantage of the judged tokens.",
)
def judged_token_rewards(advantages: Tensor, batch: StepBatch, *, weight: float = 0.5) -> Tensor:
    """Token-level rewards from a token judge refine the sequence advantage that every token would share: a token
    inside a judged span gets ``A_it + w·j_it``, the others keep ``A_it``. Three seeds take this form and differ in
    the judge (``policy.probes.token_judge``), which is swappable:

    * Perceval [155]: a process reward model returns the claims of a response that contradict the visual evidence,
      and the policy gets targeted penalties on those spans (judges ``counted_claims`` against annotated counts,
      ``arithmetic_claims`` against arithmetic; a trained perception PRM registers as another judge).
    * CAPO [205]: a generative PRM critiques every step in one pass and several critiques vote (judge
      ``arithmetic_claims`` with ``scope: step``; ``policy.probes.token_judge_votes`` calls combined by
      ``token_judge_vote: majority``), refining the tokens that the rule-based outcome reward treats alike.
    * Token-level MT rewards [224]: a quality estimator (xCOMET) returns error spans with severities as token-level
      rewards (judge ``reference_diff``: MQM weights minor 1, major 5 against the row's reference).
    * RED [247]: an off-the-shelf sequence reward model scored on every prefix, ``r_t = R(≤ t) − R(< t)``, credits
      each token with its reward gain (judge ``prefix_reward_gains`` with any configured reward: prefixes end at
      words, so the tokens of one word share its gain).

    Reading chosen: the token reward is added to the (group-normalised) sequence advantage with one weight ``w`` (the
    papers add it to a PPO/GRPO token reward; the scale between the two is ours), and a token overlapping several
    spans takes the most severe.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask`` and ``token_judgement`` ``[N, T]``.
        weight: ``w >= 0`` (0: plain GRPO).
    Returns:
        ``[N, T]`` advantages with the judged token rewards (unchanged on padding).
    """
    if not weight >= 0:
        raise ValueError(f"judged_token_rewards: weight={weight!r} must be >= 0 (0 turns the token rewards off)")
    judged, _ = _judgement(batch, "judged_token_rewards", advantages)
    return advantages + weight * judged  # [N, T]


def early_step_penalties(judged: Tensor, segment_ids: Tensor, valid: Tensor, penalty: float, decay: float) -> Tensor:
    """``[N, T]`` the penalty of every token of an invalid step (a segment holding a negatively judged token):
    ``λ·γ^k`` for the sample's ``k``-th invalid step (0 = its earliest), so earlier invalid steps weigh exponentially
    more; 0 on valid steps and padding.

    Args:
        judged: ``[N, T]`` judge values; segment_ids: ``[N, T]`` step index of each action (non-decreasing);
        valid: ``[N, T]`` bool; penalty: ``λ``; decay: ``γ`` in ``(0, 1]``.
    """
    segments = torch.where(valid, segment_ids.long(), 0)  # [N, T]
    width = int(segments.max()) + 1 if segments.numel() else 1
    error = (valid & (judged < 0)).long()  # [N, T]
    invalid = torch.zeros(segments.shape[0], width, dtype=torch.long, device=segments.device)
    invalid = invalid.scatter_add_(1, segments, error) > 0  # [N, S] the step holds an error
    rank = torch.cumsum(invalid.long(), 1) - 1  # [N, S] 0 for the earliest invalid step
    per_step = torch.where(invalid, penalty * decay ** rank.clamp_min(0).double(), 0.0)  # [N, S]
    return torch.where(valid, per_step.gather(1, segments), 0.0)  # [N, T]


@CREDIT_RULES.register(
    "early_step_penalty",
    needs=("token_judgement", "segment_ids", "combined_reward"),
    formula="step s invalid ⇔ a token of s has j < 0; for a wrong answer (R_i < r*): the k-th invalid step "
    "(k = 0 earliest) costs p_k = λ·γ^k; A_it ← A_it − p_{k(t)}; correct answers unchanged",
    source="[169] MRPO (Medical Reasoning-aware Policy Optimization)",
    summary="When the final answer is wrong, penalise the tokens of invalid reasoning steps, the earlier steps "
    "exponentially more, to break failure cascades; correct answers are untouched.",
)
def early_step_penalty(
    advantages: Tensor,
    batch: StepBatch,
    *,
    penalty: float = 0.5,
    decay: float = 0.5,
    correct_reward: float = 1.0,
) -> Tensor:
    """MRPO [169]: cascading errors start in early reasoning steps, so when the final answer is incorrect the tokens
    of invalid steps get penalties that grow exponentially towards the start of the reasoning; a successful path is
    never penalised. A step is a segment of ``segment_ids`` (sentence / line), invalid when the token judge marks a
    token in it (``arithmetic_claims`` with ``scope: step`` by default; a medical step verifier registers as another
    judge); a sample is incorrect when its combined reward is below ``correct_reward``.

    Reading chosen: the ``k``-th invalid step of a sample (in reading order, ``k = 0`` first) costs ``λ·γ^k`` on top
    of its sequence advantage (the abstract gives "exponentially larger penalties to earlier invalid steps" but not
    the base or the scale).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask``, ``token_judgement``, ``segment_ids`` ``[N, T]`` and ``combined_reward`` ``[N]``.
        penalty: ``λ >= 0``, the earliest invalid step's penalty.
        decay: ``γ`` in ``(0, 1]``: each later invalid step costs ``γ`` times the one before.
        correct_reward: a combined reward at or above this is a correct answer.
    Returns:
        ``[N, T]`` advantages with the step penalties (unchanged for correct answers and on padding).
    """
    if not (penalty >= 0 and 0 < decay <= 1):
        raise ValueError(f"early_step_penalty needs penalty >= 0 and 0 < decay <= 1, got {penalty!r}, {decay!r}")
    judged, valid = _judgement(batch, "early_step_penalty", advantages)
    segments = batch.require("segment_ids", "credit rule 'early_step_penalty'").to(advantages.device)
    reward = batch.require("combined_reward", "credit rule 'early_step_penalty'").to(advantages.device)  # [N]
    wrong = (reward < correct_reward)[:, None]  # [N, 1] (a NaN reward is not judged wrong)
    penalties = early_step_penalties(judged, segments, valid, penalty, decay).to(advantages)  # [N, T]
    return advantages - torch.where(wrong, penalties, 0.0)  # [N, T]


@CREDIT_RULES.register(
    "localized_suppression",
    needs=("token_judgement",),
    formula="A_it = −c at a judged error (j_it < 0), else κ·A_it (κ = 0: only the error positions move)",
    source="[105] TLPO (Token-Level Policy Optimization against language confusion)",
    summary="Update only at the tokens a judge marks as errors (e.g. words in the wrong language), pushing their "
    "probability down, and leave the rest of the response alone.",
)
def localized_suppression(
    advantages: Tensor, batch: StepBatch, *, strength: float = 1.0, sequence_weight: float = 0.0
) -> Tensor:
    """TLPO [105]: sequence-level objectives (DPO, GRPO) against language confusion move the whole response and can
    degrade general ability, so the update is localized: the error-prone positions a token judge finds (judge
    ``script_mismatch``: words in a script other than the row's language) get a fixed negative advantage ``−c`` that
    suppresses the error-inducing token, and every other token keeps only ``κ`` times its sequence advantage
    (``κ = 0``: untouched).

    Reading chosen: suppression is a negative advantage on the sampled error token (the policy-gradient form of the
    tailored objective). TLPO also explores the alternative candidate tokens at those positions: the regulariser
    ``candidate_suppression`` does that over the vocabulary (it lowers the mass of every wrong-script candidate at
    the judged positions).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask`` and ``token_judgement`` ``[N, T]``.
        strength: ``c > 0``.
        sequence_weight: ``κ`` in ``[0, 1]``.
    Returns:
        ``[N, T]`` localized advantages (unchanged on padding).
    """
    if not (strength > 0 and 0 <= sequence_weight <= 1):
        raise ValueError(
            f"localized_suppression needs strength > 0 and 0 <= sequence_weight <= 1, got {strength!r}, "
            f"{sequence_weight!r}"
        )
    judged, valid = _judgement(batch, "localized_suppression", advantages)
    error = valid & (judged < 0)  # [N, T]
    localized = torch.where(error, torch.full_like(advantages, -strength), sequence_weight * advantages)
    return torch.where(valid, localized, advantages)  # [N, T]
