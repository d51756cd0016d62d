"""TRUST-SQL's Dual-Track GRPO [284] over the turns of an episode (credit rule ``turn_phase_tracks``), by hand: the
last model turn(s) get the group advantage of the execution rewards, the earlier turns that of the exploration
rewards."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch

F64 = torch.float64
#: one group of four: two turns; one turn (padded); three turns; two turns with an environment token (mask 0)
TURNS = torch.tensor([[0, 0, 1, 1], [0, 0, 0, 0], [0, 1, 2, 2], [0, 0, 1, 1]])
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 1, 1]], dtype=F64)
#: exploration reward (column 0) and execution reward (column 1)
REWARDS = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=F64)


def credit(**hp):
    batch = StepBatch(mask=MASK, group_ids=torch.zeros(4, dtype=torch.long), turn_ids=TURNS, rewards=REWARDS)
    return CREDIT_RULES.get("turn_phase_tracks")(torch.zeros(4, 4, dtype=F64), batch, scale_by_std=False, **hp)


def test_the_last_turn_gets_the_execution_track_and_the_earlier_turns_the_exploration_track():
    # mean-centred: exploration [.5, −.5, .5, −.5], execution [−.25, −.25, −.25, .75]
    expected = torch.tensor([[0.5, 0.5, -0.25, -0.25], [-0.25, -0.25, 0.0, 0.0], [0.5, 0.5, -0.25, -0.25],
                             [-0.5, 0.0, 0.75, 0.75]], dtype=F64)  # fmt: skip
    torch.testing.assert_close(credit(), expected)


def test_more_execution_turns_move_the_boundary_back():
    expected = torch.tensor([[-0.25] * 4, [-0.25, -0.25, 0.0, 0.0], [0.5, -0.25, -0.25, -0.25],
                             [0.75, 0.0, 0.75, 0.75]], dtype=F64)  # fmt: skip
    torch.testing.assert_close(credit(execution_turns=2), expected)


def test_bad_values_name_the_keyword():
    with pytest.raises(ValueError, match="needs two lists of reward columns"):
        credit(track_rewards=[[0]])
    with pytest.raises(ValueError, match="execution_turns=0 must be an int >= 1"):
        credit(execution_turns=0)
