"""Dual-track advantages over the phases of a multi-turn episode (a rule of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`): the model turns before the last ``execution_turns`` form the
exploration phase, the last ones the execution phase, and each phase's tokens get the group advantage of its own
rewards (TRUST-SQL's Dual-Track GRPO [284] over tool turns; the single-completion form with block markers is the
recipe ``role_segments``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.advantages.group_baselines import dr_grpo, grpo
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.experimental.credit.roles import _role_rewards


def turn_phases(turn_ids: Tensor, mask: Tensor, execution_turns: int) -> Tensor:
    """``[N, T]`` long: 1 on the actions of each sample's last ``execution_turns`` model turns (execution), 0 on the
    earlier ones (exploration); ``turn_ids`` ``[N, T]`` non-decreasing, ``mask`` ``[N, T]`` the model's actions."""
    valid = mask > 0
    last = torch.where(valid, turn_ids, -1).amax(1, keepdim=True)  # [N, 1] the sample's last model turn
    return (valid & (turn_ids > last - execution_turns)).long()


def turn_track_rewards(turn_rewards: Tensor, turn_ids: Tensor, mask: Tensor, execution_turns: int) -> Tensor:
    """``[N, 2]``: the sum of each track's per-turn rewards ``turn_rewards`` ``[N, K]`` (turn ``k`` in column ``k``;
    NaN = none): the exploration turns ``k <= last − E``, then the execution turns; NaN where a track has none."""
    valid = mask > 0
    last = torch.where(valid, turn_ids, -1).amax(1, keepdim=True)  # [N, 1]
    k = torch.arange(turn_rewards.shape[1], device=turn_rewards.device)[None, :]  # [1, K]
    present = ~torch.isnan(turn_rewards) & (k <= last)  # [N, K]
    columns = []
    for track in (k <= last - execution_turns, k > last - execution_turns):  # [N, K] each
        picked = present & track
        total = torch.where(picked, turn_rewards, 0.0).sum(1)  # [N]
        columns.append(torch.where(picked.any(1), total, torch.nan))
    return torch.stack(columns, dim=1)  # [N, 2]


@CREDIT_RULES.register(
    "turn_phase_tracks",
    needs=("turn_ids", "turn_rewards", "rewards"),
    replaces=True,
    formula="phase_it = 1 if turn_it > last_turn_i − E else 0 (exploration turns, then the last E execution turns); "
    "R_ip = Σ_{k∈K_p} r_ik; A_ip = w_p·(R_ip − mean_G R_p)/(std_G R_p + eps); A_it = A_{i, phase_it}",
    source="[284] TRUST-SQL (Dual-Track GRPO over the tool turns of an episode); [288] GRPO-Verif (with the "
    "verify_solution environment: solution and separately sampled verification, the verification weighted)",
    summary="Dual-track credit for multi-turn episodes: exploration turns get the group advantage of the exploration "
    "rewards, the final execution turn(s) that of the execution outcome.",
)
def turn_phase_tracks(
    advantages: Tensor,
    batch: StepBatch,
    *,
    track_rewards: Sequence[Sequence[int]] = ((0,), (1,)),
    execution_turns: int = 1,
    track_weights: Sequence[float] = (1.0, 1.0),
    track_source: Literal["rewards", "turn_rewards"] = "rewards",
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """TRUST-SQL's Dual-Track GRPO [284]: the agent's four-phase protocol (explore and verify the schema with tools,
    then write and execute the SQL) gives a structural boundary; token-level masked advantages isolate the exploration
    rewards from the execution outcome, so a sound schema exploration is not blamed for a wrong query and vice versa.

    Reading chosen: the abstract does not say where the boundary lies in a rollout; genalign puts it at the turn
    level of the multi-turn rollout (``turn_ids``): the sample's last ``execution_turns`` model turns are the
    execution track, every earlier turn the exploration track (an episode of one turn is all execution). Track ``p``'s
    reward is the sum of the reward columns ``track_rewards[p]`` (e.g. a schema-recall reward, then the execution
    match), normalised within the group like GRPO (``scale_by_std=False``: mean-centring only), the same per-track
    estimate as ``role_segments``. The rule replaces the incoming advantages, so it comes first in the credit list.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages (ignored: the rule replaces them).
        batch: reads ``rewards`` ``[N, K]``, ``group_ids``, ``mask`` and ``turn_ids`` ``[N, T]``.
        track_rewards: the reward columns of the exploration track, then of the execution track (``rewards``
            source).
        track_source: ``rewards``: the tracks' rewards are reward columns (``track_rewards``); ``turn_rewards``: the
            environment's rewards of the track's own turns, summed (``verify_solution`` scores the solution turn and
            the verification turn).
        execution_turns: the last model turns that form the execution track (>= 1).
        track_weights: each track's advantage is multiplied by its weight (GRPO-Verif's verification weight [288]:
            ``[1, α]`` with the solution turn as exploration track and the verification turn as execution track).
        scale_by_std: divide by the group std of the track's reward.
        eps: added to the group std.
    Returns:
        ``[N, T]`` per-action advantages (0 on padding).
    """
    if len(track_rewards) != 2:
        raise ValueError(f"turn_phase_tracks: track_rewards={track_rewards!r} needs two lists of reward columns: the "
                         "exploration track's, then the execution track's, e.g. [[1], [0]].")  # fmt: skip
    if isinstance(execution_turns, bool) or not isinstance(execution_turns, int) or execution_turns < 1:
        raise ValueError(f"turn_phase_tracks: execution_turns={execution_turns!r} must be an int >= 1.")
    weights = list(track_weights)
    if len(weights) != 2 or not all(isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0
                                    for w in weights):  # fmt: skip
        raise ValueError(f"turn_phase_tracks: track_weights={track_weights!r} must be two numbers >= 0.")
    rewards = batch.require("rewards", "credit rule 'turn_phase_tracks'")  # [N, K]
    turns = batch.require("turn_ids", "credit rule 'turn_phase_tracks'").to(advantages.device)  # [N, T]
    mask = batch.mask.to(advantages.device)
    if track_source == "rewards":
        per_track = _role_rewards(rewards.to(advantages.device, advantages.dtype), track_rewards)  # [N, 2]
    elif track_source == "turn_rewards":
        earned = batch.require("turn_rewards", "credit rule 'turn_phase_tracks'").to(advantages.device)  # [N, K]
        per_track = turn_track_rewards(earned.to(advantages.dtype), turns.long(), mask, execution_turns)  # [N, 2]
    else:
        raise ValueError(f"turn_phase_tracks: track_source={track_source!r} must be 'rewards' or 'turn_rewards'.")
    group_ids = batch.group_ids.to(advantages.device)
    estimate = grpo(per_track, group_ids, eps=eps) if scale_by_std else dr_grpo(per_track, group_ids)  # [N, 2]
    estimate = estimate * estimate.new_tensor(weights)
    phase = turn_phases(turns.long(), mask, execution_turns)  # [N, T]
    return torch.where(mask > 0, estimate.gather(1, phase), 0.0)  # [N, T]
