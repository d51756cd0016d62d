"""Role-typed segment credit for multi-turn rollouts: TRIAGE [8] (a rule of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`), and the ``turn_roles`` structure it reads.

The segments are the model turns the rollout declares (``turn_ids``); their roles come from the segment judge of the
run (``policy.multi_turn.segment_judge``, :mod:`genalign.environments.judges`), recorded by the rollout as
``turn_roles`` ``[N, K]``. Neither is read from text the model writes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.signals import declare_signal
from genalign.algorithms.turns import per_turn, turn_layout

#: the role names of ``turn_roles`` (value = 1 + index; kept equal to genalign.environments.judges.ROLES: a test checks)
ROLE_NAMES = ("decisive", "exploration", "infrastructure", "regression")

declare_signal("turn_roles", ("N", "K"), "rollout",
               "The judged role of each model turn, 1 + its index in ROLE_NAMES (1 decisive progress, 2 useful "
               "exploration, 3 no-progress infrastructure, 4 regression; 0 where the sample has no such turn), from "
               "the run's segment judge.", dtype="integer", source="[8] TRIAGE")  # fmt: skip


@CREDIT_RULES.register(
    "triage",
    needs=("turn_ids", "turn_roles"),
    formula="r_ik = clamp(c_{role_ik}, −b, b) (c = decisive, exploration, infrastructure, regression constants); "
    "A_it ← A_it + r_ik for the actions t of turn k; turns without a role keep A_it",
    source="[8] TRIAGE (role-typed segment credit; fixed role-conditioned bounded segment rewards)",
    summary="Each model turn is judged decisive progress, useful exploration, no-progress infrastructure or regression "
    "and gets a fixed bounded process reward for its role added to the outcome advantage.",
)
def triage(
    advantages: Tensor,
    batch: StepBatch,
    *,
    decisive: float = 0.1,
    exploration: float = 0.2,
    infrastructure: float = -0.1,
    regression: float = -0.3,
    bound: float = 0.5,
) -> Tensor:
    """TRIAGE [8]: the verifier outcome keeps the direction of the update (the incoming advantages), and a fixed
    role-conditioned rule adds a bounded segment-level process reward: useful exploration inside a failed
    trajectory is punished less, a regressive or redundant action inside a successful one is reinforced less.

    Reading chosen: a segment is one model turn (``turn_ids``); its role is the run's judge's label (``turn_roles``,
    rule-based by default: :func:`genalign.environments.judges.tool_outcomes`); the role constants are added to the
    incoming per-action advantages of the turn's actions (their sign and size are hyper-parameters; the abstract fixes
    neither), each clamped to ``[−bound, bound]``.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages (the outcome credit).
        batch: reads ``turn_ids`` ``[N, T]``, ``turn_roles`` ``[N, K]`` and ``mask``.
        decisive, exploration, infrastructure, regression: the process reward of each role.
        bound: ``b > 0``, the largest process reward in absolute value.
    Returns:
        ``[N, T]`` advantages (unchanged on padding, environment tokens and turns without a role).
    """
    if not bound > 0:
        raise ValueError(f"triage needs bound > 0, got {bound!r}")
    layout = turn_layout(batch, "credit rule 'triage'")
    roles = batch.require("turn_roles", "credit rule 'triage'").long().to(advantages.device)  # [N, K']
    constants = torch.tensor([decisive, exploration, infrastructure, regression], dtype=advantages.dtype)
    constants = constants.clamp(-bound, bound).to(advantages.device)  # [4]
    table = torch.zeros(roles.shape[0], layout.width, dtype=torch.long, device=advantages.device)  # [N, K] 0: none
    width = min(layout.width, roles.shape[1])
    table[:, :width] = roles[:, :width]
    known = (table >= 1) & (table <= len(constants)) & layout.present.to(advantages.device)  # [N, K]
    process = torch.where(known, constants[(table - 1).clamp(0, len(constants) - 1)], 0.0)  # [N, K]
    return torch.where(layout.valid, advantages + per_turn(process, layout.turns), advantages)  # [N, T]
