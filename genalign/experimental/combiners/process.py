"""Outcome + process rewards with decoupled normalisation (PAPO [320]): a reward combiner of
:data:`~genalign.algorithms.reward_combiners.REWARD_COMBINERS`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from genalign.algorithms.advantages.group_baselines import grpo
from genalign.algorithms.reward_combiners import (
    REWARD_COMBINERS,
    check_combiner_inputs,  # the combiners' own checks
    reward_statistics,
    weighted_nansum,
)


@REWARD_COMBINERS.register(
    "outcome_process",
    min_rewards=2,
    formula="r_o = Σ_{k≠p} w_k r_k; A_out = group z-score of r_o; A_proc = z-score of r_p among the group's correct "
    "samples (r_o > τ), 0 for the others; r_i = A_out + w_p·A_proc; pair with dr_grpo",
    source="[320] PAPO",
    summary="Outcome advantage normalised over all responses plus a process advantage normalised only among the "
    "correct ones, so the process score ranks correct answers without distorting correctness.",
)
def outcome_process(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor | Sequence[float],
    *,
    process_column: int = -1,
    success_threshold: float = 0.0,
    eps: float = 1e-6,
    unbiased_std: bool = True,
    names: Sequence[str] | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Process-Aware Policy Optimization [320]: the advantage is ``A_out + A_proc``. ``A_out`` comes from the outcome
    reward (ORM) normalised over all responses of the group; ``A_proc`` from the process reward (a rubric-based PRM)
    normalised *only among the correct responses* of the group and 0 for the others. ``A_out`` anchors correctness;
    ``A_proc`` separates correct answers by reasoning quality (its signal survives when a group becomes uniformly
    correct), and because it never ranks a wrong answer above a right one, process-score hacking cannot buy
    correctness.

    Reading chosen: ``rewards[:, process_column]`` is the process reward, the weighted sum of the other columns the
    outcome; both are GRPO z-scores within the group (a group with fewer than two correct samples has ``A_proc = 0``);
    the process part is scaled by its reward weight ``w_p`` (1 = the paper's plain sum). The result is already an
    advantage centred in every group: pair the combiner with the ``dr_grpo`` estimator, which keeps it unchanged.

    Args:
        rewards: ``[N, K]``, ``K >= 2``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        weights: ``[K]`` reward weights.
        process_column: column of the process reward (default: the last).
        success_threshold: a response is correct when its outcome reward exceeds it.
        eps: added to the group stds.
        unbiased_std: ``n − 1`` (True) or ``n`` (False).
        names: reward names for ``stats`` (plus ``process/frac_correct``).
    Returns:
        ``(combined [N], stats)``; NaN where the outcome is missing.
    """
    rewards, weights = check_combiner_inputs(rewards, group_ids, weights)
    k = rewards.shape[1]
    if k < 2 or not -k <= process_column < k:
        raise ValueError(
            f"outcome_process needs an outcome and a process reward (K >= 2 columns) and process_column in "
            f"[-K, K), got K={k}, process_column={process_column!r}"
        )
    process = process_column % k
    outcome_columns = [j for j in range(k) if j != process]
    outcome = weighted_nansum(rewards[:, outcome_columns], weights[outcome_columns])  # [N]
    a_out = grpo(outcome, group_ids, eps=eps, unbiased_std=unbiased_std)  # [N], 0 where missing
    correct = outcome > success_threshold  # [N], False where missing
    among_correct = torch.where(correct, rewards[:, process], torch.nan)  # [N]
    a_proc = grpo(among_correct, group_ids, eps=eps, unbiased_std=unbiased_std)  # [N], 0 for the others
    combined = torch.where(torch.isnan(outcome), torch.nan, a_out + weights[process] * a_proc)  # [N]
    stats = reward_statistics(rewards, names)
    stats["process/frac_correct"] = float(correct.float().mean())
    return combined, stats
