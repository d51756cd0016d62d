"""DyCo's alignment-guided advantage reweighting ([199], ``modality_alignment_weights``): token roles from the
within-modality attention shifts, role alignment, and the reweighted advantages, against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.experimental.credit.modality_roles import role_alignment

F64 = torch.float64
# per action: (share on the image, within-image shift, within-text shift)
READINGS = torch.tensor([[[0.8, 1.0, 0.2], [0.8, 0.1, 0.5], [0.3, 0.0, 0.4]],
                         [[0.6, 0.9, 0.1], [0.2, 0.0, 0.0], [0.0, 0.0, 0.0]]])  # fmt: skip
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def test_roles_and_alignment():
    visual, alignment = role_alignment(READINGS)
    assert visual.tolist() == [[True, False, False], [True, False, False]]  # a tie is textual
    torch.testing.assert_close(alignment, torch.tensor([[0.8, 0.2, 0.7], [0.6, 0.8, 1.0]]))


def test_advantages_follow_the_coordination_score():
    advantages = torch.tensor([[1.7] * 3, [-1.4] * 3], dtype=F64)
    batch = StepBatch(mask=MASK, modality_attention=READINGS)
    full = CREDIT_RULES.get("modality_alignment_weights")(advantages, batch, mix=1.0)
    # row 0: alignments (0.8, 0.2, 0.7), mean 0.5667 -> w = a / mean; row 1: (0.6, 0.8), mean 0.7; padding untouched
    expected = torch.tensor([[1.7 * 0.8 / (1.7 / 3), 1.7 * 0.2 / (1.7 / 3), 1.7 * 0.7 / (1.7 / 3)],
                             [-1.4 * 0.6 / 0.7, -1.4 * 0.8 / 0.7, -1.4]], dtype=F64)  # fmt: skip
    torch.testing.assert_close(full, expected)
    half = CREDIT_RULES.get("modality_alignment_weights")(advantages, batch)  # β = ½
    torch.testing.assert_close(half, (advantages + expected) / 2)
    with pytest.raises(ValueError, match="mix=2 must be in"):
        CREDIT_RULES.get("modality_alignment_weights")(advantages, batch, mix=2)
