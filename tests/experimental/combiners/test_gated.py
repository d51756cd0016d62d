"""GenRec's relevance-gated hybrid reward [52] (``relevance_gated``): the dense reward counts only behind the gate."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import REWARD_COMBINERS

NAN = float("nan")


def test_the_dense_reward_counts_only_for_relevant_samples():
    # columns: dense RM score, a second dense score, relevance (the gate, last column)
    rewards = torch.tensor([[0.9, 0.2, 0.8], [0.9, 0.2, 0.3], [0.1, NAN, 0.5], [0.4, 0.4, NAN]])
    combined, stats = REWARD_COMBINERS.get("relevance_gated")(
        rewards, torch.tensor([0, 0, 1, 1]), torch.tensor([1.0, 0.5, 7.0]), threshold=0.5, gated_value=-1.0
    )
    # passes: 0.9 + 0.5·0.2; fails: the gated value (a high dense score does not help); passes with a missing dense
    # column: the rest of the weighted sum; a missing gate: no reward at all
    torch.testing.assert_close(combined, torch.tensor([1.0, -1.0, 0.1, NAN]), equal_nan=True)
    assert stats["relevance_gated/frac_passed"] == pytest.approx(2 / 3)


def test_gate_column_and_bad_shapes():
    rewards = torch.tensor([[0.7, 0.2], [0.1, 0.9]])
    combined, _ = REWARD_COMBINERS.get("relevance_gated")(rewards, torch.tensor([0, 0]), [1.0, 1.0], gate_column=0)
    torch.testing.assert_close(combined, torch.tensor([0.2, 0.0]))
    assert REWARD_COMBINERS.meta("relevance_gated")["min_rewards"] == 2
    with pytest.raises(ValueError, match=r"K >= 2 columns"):
        REWARD_COMBINERS.get("relevance_gated")(torch.zeros(2, 1), torch.tensor([0, 0]), [1.0])
