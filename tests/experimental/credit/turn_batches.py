"""A hand-made multi-turn step batch for the turn-level credit tests: 2 groups of 2 samples, model tokens (mask 1)
and environment tokens (mask 0) laid out by turn.

    sample  group  mask                 turn_ids             turns (valid actions)   turn_rewards
    0       0      [1, 1, 0, 1, 0, 0]   [0, 0, 0, 1, 1, 1]   0: 2, 1: 1              [1.0, 0.0, nan]
    1       0      [1, 0, 1, 1, 1, 0]   [0, 0, 1, 1, 1, 1]   0: 1, 1: 3              [0.0, 2.0, nan]
    2       1      [1, 1, 1, 0, 0, 0]   [0, 0, 0, 0, 0, 0]   0: 3                    [0.5, nan, nan]
    3       1      [1, 0, 1, 0, 1, 1]   [0, 0, 1, 1, 2, 2]   0: 1, 1: 1, 2: 2        [0.5, nan, 1.0]

Sample advantages (the outcome) ``[1, −1, 0.5, −0.5]``, combined rewards ``[1, 0, 1, 0]``.
"""

from __future__ import annotations

import math

import torch

from genalign.algorithms import StepBatch

F64 = torch.float64
NAN = math.nan
MASK = [[1, 1, 0, 1, 0, 0], [1, 0, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0], [1, 0, 1, 0, 1, 1]]
TURN_IDS = [[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [0, 0, 1, 1, 2, 2]]
TURN_REWARDS = [[1.0, 0.0, NAN], [0.0, 2.0, NAN], [0.5, NAN, NAN], [0.5, NAN, 1.0]]
SAMPLE_ADVANTAGES = [1.0, -1.0, 0.5, -0.5]


def t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def close(actual: torch.Tensor, expected, tol: float = 1e-9) -> None:
    torch.testing.assert_close(actual, t(expected), rtol=0, atol=tol)


def turn_batch(**values) -> StepBatch:
    """The batch of the module docstring, with ``values`` added (features such as ``behaviour_logp``)."""
    return StepBatch(
        mask=t(MASK),
        group_ids=torch.tensor([0, 0, 1, 1]),
        turn_ids=torch.tensor(TURN_IDS),
        turn_rewards=t(TURN_REWARDS),
        sample_advantages=t(SAMPLE_ADVANTAGES),
        combined_reward=t([1.0, 0.0, 1.0, 0.0]),
        **values,
    )
