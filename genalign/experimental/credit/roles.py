"""Role-specific segment advantages: each text block of a completion is credited with its own reward
(a rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`).

The blocks come from the rollout's declared structure (````block_ids````: the number of configured block
markers that start at or before each action), the rewards from the trainer (the batch's ``rewards``, one column per
configured reward function, in config order).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from genalign.algorithms.advantages.group_baselines import dr_grpo, grpo
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


def _role_rewards(rewards: Tensor, role_rewards: Sequence[Sequence[int]]) -> Tensor:
    """``[N, R]``: for each role the sum of its reward columns (missing values skipped; NaN if all are missing)."""
    columns = []
    for role, picks in enumerate(role_rewards):
        picks = list(picks)
        if not picks or not all(isinstance(k, int) and 0 <= k < rewards.shape[1] for k in picks):
            raise ValueError(
                f"role_rewards[{role}] = {picks!r} must be a non-empty list of reward columns in 0..{rewards.shape[1] - 1} "
                "(the positions of the rewards in the config's rewards list)"
            )
        part = rewards[:, picks]  # [N, k]
        present = ~torch.isnan(part)
        total = torch.where(present, part, 0.0).sum(1)  # [N]
        columns.append(torch.where(present.any(1), total, torch.nan))
    return torch.stack(columns, dim=1)  # [N, R]


@CREDIT_RULES.register(
    "role_segments",
    needs=("block_ids", "rewards"),
    replaces=True,
    formula="R_ir = Σ_{k∈K_r} r_ik (the reward columns of role r); A_ir = (R_ir − mean_G R_r)/(std_G R_r + eps); "
    "A_it = A_{i, min(b_it, R−1)}, b_it = text block of action t",
    source="[175] SD-GRPO (DynFrame)",
    summary="Role-specific segment advantages: the tokens of each block (e.g. where to look / how to answer) get "
    "the group advantage of that role's own reward.",
)
def role_segments(
    advantages: Tensor,
    batch: StepBatch,
    *,
    role_rewards: Sequence[Sequence[int]] = ((0,), (1,)),
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Segment-Decoupled GRPO [175]: a rollout split at a boundary gets role-specific token-level advantages, so the
    "where to look" tokens and the "how to answer" tokens are credited separately (a good retrieval is not blamed for
    a wrong answer, and vice versa).

    Reading chosen: the roles are the completion's text blocks (``block_ids``: the configured markers, e.g.
    ``</fps>`` or ``<answer>``, found in order, open blocks 1, 2, ...; blocks past the last role get the last role);
    role ``r``'s reward is the sum of the reward columns ``role_rewards[r]`` (DynFrame: IoU + FPS match for the
    sampling segment, answer + format for the reasoning segment), normalised within the group like GRPO
    (``scale_by_std=False``: Dr. GRPO's mean-centring only). A completion that never emits the marker is all role 0.
    The rule derives its result from the rewards and the structure alone, so it comes first in the credit list.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages (ignored: the rule replaces them).
        batch: reads ``rewards`` ``[N, K]``, ``group_ids`` and ``block_ids`` ``[N, T]``.
        role_rewards: for each role, the reward columns (positions in the config's ``rewards`` list) it is credited
            with.
        scale_by_std: divide by the group std of the role's reward (GRPO) or not (Dr. GRPO).
        eps: added to the group std.
    Returns:
        ``[N, T]`` per-action advantages.
    """
    if not role_rewards:
        raise ValueError("role_rewards must list the reward columns of at least one role, e.g. [[0], [1]]")
    rewards = batch.require("rewards", "role_segments")  # [N, K]
    blocks = batch.require("block_ids", "credit rule 'role_segments'")  # [N, T]
    per_role = _role_rewards(rewards.to(advantages.device, advantages.dtype), role_rewards)  # [N, R]
    group_ids = batch.group_ids.to(advantages.device)
    estimate = grpo(per_role, group_ids, eps=eps) if scale_by_std else dr_grpo(per_role, group_ids)  # [N, R]
    role = blocks.to(per_role.device).long().clamp(0, len(role_rewards) - 1)  # [N, T]
    return estimate.gather(1, role)  # [N, T]
