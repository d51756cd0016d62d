"""PPPO [215] (``progressive_prefix``): the retained prefix grows with training progress, counted in valid tokens of
each response; accepted by the config loader."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from tests.algorithms.arith_config import arith_lm_config

MASK = torch.tensor([[1.0] * 10, [1.0] * 4 + [0.0] * 6, [0.0, 0.0] + [1.0] * 8])  # row 2 is left-padded


def kept(progress: float, mask=MASK, **hp) -> list[int]:
    inputs = StepBatch(
        sample_advantages=torch.ones(3), mask=mask, group_ids=torch.zeros(3, dtype=torch.long), progress=progress
    )
    out = CREDIT_RULES.get("progressive_prefix")(torch.ones(mask.shape), inputs, **hp)
    assert torch.equal(out, out * (mask > 0))  # never on padding
    return out.sum(1).long().tolist()


def test_retained_prefix_grows_linearly_from_start_to_end_fraction():
    # r = 0.1 at the start: ⌈0.1·10⌉ = 1 (exactly 1: no float spill to 2), ⌈0.1·4⌉ = 1, ⌈0.1·8⌉ = 1
    assert kept(0.0) == [1, 1, 1]
    # r = 0.3 halfway: ⌈3⌉ = 3, ⌈1.2⌉ = 2, ⌈2.4⌉ = 3
    assert kept(0.5) == [3, 2, 3]
    # r = 0.5 at the end: 5, 2, 4
    assert kept(1.0) == [5, 2, 4]
    assert kept(1.0, start_fraction=1.0, end_fraction=1.0) == [10, 4, 8]  # all tokens: GRPO
    assert kept(0.0, min_tokens=2) == [2, 2, 2]


def test_the_prefix_is_the_first_valid_tokens():
    inputs = StepBatch(
        sample_advantages=torch.ones(3), mask=MASK, group_ids=torch.zeros(3, dtype=torch.long), progress=1.0
    )
    out = CREDIT_RULES.get("progressive_prefix")(torch.ones(3, 10), inputs)
    assert out[2].tolist() == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]  # after the left padding


def test_needs_progress_and_valid_fractions():
    with pytest.raises(ValueError, match="progress"):
        CREDIT_RULES.get("progressive_prefix")(
            torch.ones(3, 10), StepBatch(sample_advantages=torch.ones(3), mask=MASK, group_ids=torch.zeros(3).long())
        )
    with pytest.raises(ValueError, match="start_fraction"):
        kept(0.5, start_fraction=0.6, end_fraction=0.5)


def test_config_accepts_pppo_on_the_causal_lm():
    arith_lm_config(credit=[{"name": "progressive_prefix", "end_fraction": 0.6}])
