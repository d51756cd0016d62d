"""GRPO-Verif [288]: solving and self-verifying in one loss, each text block trained by its own group advantage and
the verification's weighted by α (rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`; experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.advantages.group_baselines import grpo
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


@CREDIT_RULES.register(
    "verification_weighted",
    needs=("block_ids", "rewards"),
    replaces=True,
    formula="A^sol_i = GRPO_G(r_i,sol), A^ver_i = GRPO_G(r_i,ver); action t gets A^sol_i in block 0 (the solution) "
    "and α·A^ver_i in later blocks (the verification); L = L_GRPO(solution) + α·L_GRPO(verification)",
    source="[288] GRPO-Verif (unified solving + self-verification loss; rewards: self_verification)",
    summary="One loss trains solving and self-verification: the solution tokens follow the solution's group "
    "advantage, the verification tokens the verification's, weighted by α.",
)
def verification_weighted(
    advantages: Tensor,
    batch: StepBatch,
    *,
    solution_column: int = 0,
    verification_column: int = 1,
    weight: float = 1.0,
    eps: float = 1e-6,
) -> Tensor:
    """GRPO-Verif [288]: a model should also check its own solutions. The loss is GRPO's on the solution (reward: its
    correctness) plus ``α`` times GRPO's on the self-verification (reward: the verdict agrees with the solution's
    correctness); ``α`` sets the weight of the verification signal.

    Reading chosen: the verification is written in the same completion, after a marker that opens a second text block
    (``block_ids`` from ``policy.probes.block_markers``), instead of a second generation per solution; each block is
    trained only by its own reward's group-normalised advantage (GRPO within the prompt's group), the verification
    block's scaled by ``α``, which is exactly the weighted sum of the two GRPO losses over the two token sets. The
    rewards are two reward columns, e.g. the ``self_verification`` reward with ``part: solution`` and
    ``part: verdict``. A completion without the marker is all solution (its verdict reward is 0 in the verification
    group). Unlike ``blockwise`` [56], the verification's baseline is the whole group's, not stratified by outcome.

    Args:
        advantages: ``[N, T]`` incoming advantages (replaced).
        batch: reads ``rewards`` ``[N, K]``, ``block_ids`` ``[N, T]``, ``group_ids`` and ``mask``.
        solution_column, verification_column: the reward columns (``rewards`` order) of the two parts.
        weight: ``α >= 0``.
        eps: added to the group std (GRPO).
    Returns:
        ``[N, T]`` per-action advantages (0 on padding).
    """
    rewards = batch.require("rewards", "credit rule 'verification_weighted'")  # [N, K]
    k = rewards.shape[1]
    if not (0 <= solution_column < k and 0 <= verification_column < k and solution_column != verification_column):
        raise ValueError(
            f"solution_column={solution_column!r} and verification_column={verification_column!r} must be two "
            f"different reward columns in [0, {k}) (the order of config rewards)"
        )
    if not weight >= 0:
        raise ValueError(f"weight={weight!r} (α, the verification's weight) must be >= 0")
    group_ids = batch.group_ids.to(rewards.device)
    solution = grpo(rewards[:, solution_column].double(), group_ids, eps=eps)  # [N]
    verification = grpo(rewards[:, verification_column].double(), group_ids, eps=eps)  # [N]
    blocks = batch.require("block_ids", "credit rule 'verification_weighted'").to(rewards.device)  # [N, T]
    per_action = torch.where(blocks >= 1, weight * verification[:, None], solution[:, None])  # [N, T]
    mask = batch.mask.to(advantages.device)
    return torch.where(mask > 0, per_action.to(advantages), 0.0)  # [N, T]
