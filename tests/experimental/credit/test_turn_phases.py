"""TRUST-SQL's Dual-Track GRPO [284] over the turns of an episode (credit rule ``turn_phase_tracks``), by hand: the
last model turn(s) get the group advantage of the execution rewards, the earlier turns that of the exploration
rewards."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch

F64 = torch.float64
NAN = float("nan")
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


def test_each_tracks_advantage_is_scaled_by_its_weight():
    # GRPO-Verif's verification weight α = 0.5 on the execution (verification) track
    expected = torch.tensor([[0.5, 0.5, -0.125, -0.125], [-0.125, -0.125, 0.0, 0.0], [0.5, 0.5, -0.125, -0.125],
                             [-0.5, 0.0, 0.375, 0.375]], dtype=F64)  # fmt: skip
    torch.testing.assert_close(credit(track_weights=[1.0, 0.5]), expected)
    with pytest.raises(ValueError, match="must be two numbers >= 0"):
        credit(track_weights=[1.0, -1.0])


def test_the_tracks_can_read_the_environments_turn_rewards():
    # GRPO-Verif [288] with verify_solution: turn 0 earns the solution's score, the last turn the verdict's agreement
    turn_rewards = torch.tensor([[1.0, 0.0, NAN], [1.0, NAN, NAN], [0.0, 1.0, 1.0], [0.0, 1.0, NAN]], dtype=F64)
    batch = StepBatch(mask=MASK, group_ids=torch.zeros(4, dtype=torch.long), turn_ids=TURNS, rewards=REWARDS,
                      turn_rewards=turn_rewards)  # fmt: skip
    got = CREDIT_RULES.get("turn_phase_tracks")(torch.zeros(4, 4, dtype=F64), batch, scale_by_std=False,
                                                track_source="turn_rewards")  # fmt: skip
    # tracks by hand: exploration = turns before the last: [1, NaN (one turn only), 0 + 1, 0]; execution = the last
    # turn: [0, 1, 1, 1]. Centred over the valid ones: exploration mean 2/3 → [1/3, (0), 1/3, −2/3]; execution
    # mean 3/4 → [−3/4, 1/4, 1/4, 1/4]
    third = 1 / 3
    expected = torch.tensor([[third, third, -0.75, -0.75], [0.25, 0.25, 0.0, 0.0], [third, third, 0.25, 0.25],
                             [-2 * third, 0.0, 0.25, 0.25]], dtype=F64)  # fmt: skip
    torch.testing.assert_close(got, expected)
