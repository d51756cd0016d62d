"""What the rules that draw guided extra rounds share (:mod:`~genalign.experimental.sampling.drafts`,
:mod:`~genalign.experimental.sampling.reward_goals`, :mod:`~genalign.experimental.sampling.in_context`): the hint a
prompt was planned with, which a round's guidance extends, and the round each sample of an outcome was drawn in."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from genalign.policies.base import GUIDANCE_KEY
from genalign.sampling.base import Outcome


def planned_hint(row: dict[str, Any]) -> str:
    """The ``hint`` guidance ``row`` was planned with (rules before this one may have attached one)."""
    return str((row.get(GUIDANCE_KEY) or {}).get("hint", ""))


def rounds_of(outcome: Outcome, first: dict[int, int]) -> Tensor:
    """``[N]`` long: 0 for a sampled sample among the first ``first[p]`` of its prompt ``p`` (outcome order; one
    process samples all of a prompt's rounds), 1 for a later sampled one, −1 for a forced one."""
    forced = outcome.forced if outcome.forced is not None else torch.zeros(len(outcome), dtype=torch.bool)
    rounds = torch.full((len(outcome),), -1, dtype=torch.long)
    seen: dict[int, int] = {}
    for i, position in enumerate(outcome.positions.tolist()):
        if not forced[i]:
            seen[position] = seen.get(position, 0) + 1
            rounds[i] = int(seen[position] > first.get(position, seen[position]))
    return rounds
