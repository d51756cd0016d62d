"""Rubrics to tokens: each rubric constraint's group-relative advantage credited to the tokens relevant to it, next
to the response-level advantage (RTT [274]; rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`;
experimental tier)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from genalign.algorithms._groups import group_stats, make_groups
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.signals import declare_signal

declare_signal("constraint_relevance", ("N", "T", "C"), "rollout",
               "1 where the c-th relevance judge (policy.probes.relevance_judges) marks the action's token as "
               "relevant to rubric constraint c, else 0.", source="[274] RTT")  # fmt: skip


def constraint_advantages(rewards: Tensor, group_ids: Tensor, eps: float) -> Tensor:
    """``[N, C]`` each constraint's group-relative advantage ``(r_ic − mean_G r_c) / (std_G r_c + eps)`` from its
    scores ``rewards`` ``[N, C]`` (population std; a NaN score gets 0)."""
    values = rewards.double()
    groups = make_groups(group_ids.cpu(), values.shape[0], min_size=1)
    stats = group_stats(values, groups, unbiased=False)
    advantages = (values - stats.mean[groups.index]) / (stats.std[groups.index] + eps)  # [N, C]
    return torch.nan_to_num(advantages, nan=0.0)


def intra_sample_token_credit(relevance: Tensor, advantages: Tensor, valid: Tensor) -> Tensor:
    """``[N, T]`` ``u_it = (1/C)·Σ_c Â_ic · rel_itc · n_i / m_ic``: each constraint's advantage spread over its
    relevant tokens so that every constraint holds the same total weight ``Â_ic·n_i/C`` in the sample, however many
    tokens it touches (``n_i`` the response's actions, ``m_ic`` the tokens relevant to ``c``; a constraint with no
    relevant token adds nothing).

    Args:
        relevance: ``[N, T, C]`` 0/1; advantages: ``[N, C]``; valid: ``[N, T]`` bool.
    """
    relevance = torch.where(valid[..., None], relevance.double(), 0.0)  # [N, T, C]
    touched = relevance.sum(1)  # [N, C] m_ic
    length = valid.sum(1, keepdim=True).double()  # [N, 1] n_i
    scale = torch.where(touched > 0, advantages * length / touched.clamp_min(1), 0.0)  # [N, C]
    return (relevance * scale[:, None, :]).sum(-1) / relevance.shape[-1]  # [N, T]


@CREDIT_RULES.register(
    "rubric_token_advantages",
    needs=("constraint_relevance",),
    formula="Â_ic = group-normalised score of constraint c (reward column k_c); u_it = (1/C)·Σ_c Â_ic·rel_itc·n_i/m_ic "
    "(intra-sample token group normalisation: each constraint's credit totals Â_ic·n_i/C over its m_ic relevant "
    "tokens); A_it ← A_it + λ·u_it",
    source="[274] RTT (Rubrics to Tokens: RTT-GRPO); [92] RCCA (rubric-to-code credit assignment)",
    summary="Credit each rubric constraint's group-relative advantage to the tokens relevant to it, next to the "
    "response-level advantage.",
)
def rubric_token_advantages(
    advantages: Tensor,
    batch: StepBatch,
    *,
    weight: float = 0.5,
    reward_columns: Sequence[int] | None = None,
    eps: float = 1e-6,
) -> Tensor:
    """RTT [274]: rubric-based RL scores a response per constraint, but a response-level reward is sparse and
    ambiguous about which tokens satisfied or broke which constraint. A token-level relevance discriminator predicts,
    per constraint, the tokens responsible for it (``constraint_relevance``, from ``policy.probes.relevance_judges``:
    one swappable judge per constraint, e.g. ``keyword_spans``), and RTT-GRPO adds token-level advantages built from
    the constraints' scores to the response-level advantage. The 3-D reward (sample × token × constraint) needs its own
    normalisation: each constraint's score is normalised across the group, and inside a sample its advantage is
    spread over its relevant tokens (intra-sample token group normalisation, :func:`intra_sample_token_credit`).

    RCCA [92] takes the same route for generated code: each functional rubric item's verdict is a reward column, the
    evaluator's attributions of that item to code spans are its relevance judge (``keyword_spans`` on the item's
    anchor text by default; an evaluator model registers as a judge), and the combiner ``hierarchical_levels`` gives
    the response-level reward over format, source, runtime and functional failures.

    Reading chosen: constraint ``c``'s score is reward column ``reward_columns[c]`` of the configured rewards (one
    reward function per constraint; default column ``c``); the within-sample spreading (equal total weight per
    constraint) and the weight ``λ`` are ours; a trained discriminator registers as a judge.

    Args:
        advantages: ``[N, T]`` incoming (response-level) advantages.
        batch: reads ``mask``, ``rewards`` ``[N, K]``, ``group_ids`` and ``constraint_relevance`` ``[N, T, C]``.
        weight: ``λ >= 0``.
        reward_columns: the reward column of each constraint (``C`` entries), or None (``0 .. C − 1``).
        eps: added to the constraint's group std.
    Returns:
        ``[N, T]`` advantages with the token-level constraint credit (unchanged on padding).
    """
    if not (weight >= 0 and eps > 0):
        raise ValueError(f"rubric_token_advantages needs weight >= 0 and eps > 0, got {weight!r}, {eps!r}")
    relevance = batch.require("constraint_relevance", "credit rule 'rubric_token_advantages'").to(advantages.device)
    rewards = batch.require("rewards", "credit rule 'rubric_token_advantages'")  # [N, K]
    count = relevance.shape[-1]
    columns = list(range(count)) if reward_columns is None else list(reward_columns)
    if len(columns) != count or any(not 0 <= k < rewards.shape[1] for k in columns):
        raise ValueError(f"rubric_token_advantages: reward_columns={columns} must name one of the {rewards.shape[1]} "
                         f"reward columns for each of the {count} relevance judges (policy.probes.relevance_judges)")  # fmt: skip
    scores = constraint_advantages(rewards[:, columns], batch.group_ids, eps).to(advantages.device)  # [N, C]
    valid = batch.mask.to(advantages.device) > 0
    credit = intra_sample_token_credit(relevance, scores, valid)  # [N, T]
    return advantages + (weight * credit).to(advantages.dtype)
