"""STARE [217] (``entropy_critical_tokens``) and ERPO [251] (``entropy_pivots``) against hand-computed weights: the
surprisal quantiles per advantage side, the closed-loop entropy gate, pivots standardised per group and progress
window, and the result anchor; the config loader accepts both on the arith-lm demo."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from tests.algorithms.arith_config import arith_lm_config

F64 = torch.float64
ADV = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=F64)
MASK = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0]])
PROBS = torch.tensor(
    [[0.9, 0.5, 0.1], [0.8, 0.3, 0.6],  # positive side: the most surprising token is p = 0.1 at (0, 2)
     [0.7, 0.05, 0.9], [0.2, 0.4, 0.01]],  # negative side: p = 0.05 at (2, 1); p = 0.01 is padding
    dtype=F64,
)  # fmt: skip


def stare(entropy_value: float, **hp) -> torch.Tensor:
    inputs = StepBatch(sample_advantages=ADV, mask=MASK, group_ids=torch.zeros(4, dtype=torch.long), behaviour_logp=PROBS.log(), entropy=torch.full((4, 3), entropy_value, dtype=F64))  # fmt: skip
    return CREDIT_RULES.get("entropy_critical_tokens")(torch.ones(4, 3, dtype=F64), inputs, **hp)


def test_stare_amplifies_the_top_surprisal_positive_tokens_while_entropy_is_below_target():
    w = stare(0.1)  # batch entropy 0.1 < 0.3: gate on; P = 10 % of 6 positive tokens -> 1 token
    expected = torch.ones(4, 3, dtype=F64)
    expected[0, 2] = 1.1
    assert torch.equal(w, expected)
    expected[2, 1] = 0.9  # C2 also damps the top-surprisal negative token (never the padding p = 0.01)
    assert torch.equal(stare(0.1, variant="C2"), expected)
    # P = 50 %: the 3 most surprising positive tokens p = 0.1, 0.3, 0.5
    w = stare(0.1, top_fraction=0.5)
    assert w[:2].tolist() == [[1.0, 1.1, 1.1], [1.0, 1.1, 1.0]]


def test_stare_gate_off_above_target_entropy_is_grpo():
    assert torch.equal(stare(0.5, variant="C2"), torch.ones(4, 3, dtype=F64))
    assert stare(0.5, target_entropy=0.6)[0, 2] == 1.1  # a higher target switches it back on


def test_stare_rejects_bad_weights():
    with pytest.raises(ValueError, match="positive_weight >= 1"):
        stare(0.1, positive_weight=0.9)
    with pytest.raises(ValueError, match="variant"):
        stare(0.1, variant="X")


def pivots(entropy, groups, mask=None, **hp):
    mask = torch.ones(entropy.shape) if mask is None else mask
    adv = torch.ones(entropy.shape[0], dtype=F64)
    inputs = StepBatch(sample_advantages=adv, mask=mask, group_ids=groups, entropy=entropy)
    return CREDIT_RULES.get("entropy_pivots")(torch.ones(entropy.shape, dtype=F64), inputs, **hp)


def test_entropy_pivots_standardise_within_group_and_progress_window_then_anchor_to_the_outcome():
    entropy = torch.tensor([[1.0, 3.0, 2.0, 2.0], [1.0, 1.0, 2.0, 6.0], [9.0, 9.0, 9.0, 9.0]], dtype=F64)
    groups = torch.tensor([0, 0, 1])
    # group 0, window 0 (first half): {1, 3, 1, 1} mean 1.5, std √0.75 -> z(3) = 1.73 > 1: a pivot
    # group 0, window 1 (second half): {2, 2, 2, 6} mean 3, std √3 -> z(6) = 1.73: a pivot
    # group 1: constant entropy (high, but not against its own group) -> no pivot
    raw = pivots(entropy, groups, buckets=2, anchored=False)
    assert raw.tolist() == [[1.0, 2.0, 1.0, 1.0], [1.0, 1.0, 1.0, 2.0], [1.0] * 4]
    anchored = pivots(entropy, groups, buckets=2)  # each row divided by its mean weight 1.25
    torch.testing.assert_close(anchored[:2], raw[:2] / 1.25)
    torch.testing.assert_close(anchored.mean(1), torch.ones(3, dtype=F64))  # mean_t A_it = A_i
    # one window over the whole response: group 0 {1, 3, 2, 2, 1, 1, 2, 6} mean 2.25, std √2.4375: only 6 is a pivot
    assert math.isclose((6 - 2.25) / math.sqrt(2.4375), 2.402, abs_tol=1e-3)
    assert pivots(entropy, groups, buckets=1, anchored=False)[:2].tolist() == [[1.0] * 4, [1.0, 1.0, 1.0, 2.0]]


def test_entropy_pivots_windows_follow_each_response_length():
    entropy = torch.tensor([[5.0, 1.0, 1.0, 1.0], [1.0, 1.0, 9.0, 9.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])  # row 0 has 2 tokens: one per window
    raw = pivots(entropy, torch.zeros(2, dtype=torch.long), mask, buckets=2, anchored=False, z_threshold=0.5)
    # window 0: {5 (row 0, t0), 1, 1 (row 1, t0-1)} -> 5 is a pivot; window 1: {1 (row 0, t1), 9, 9} -> both 9s
    assert raw.tolist() == [[2.0, 1.0, 1.0, 1.0], [1.0, 1.0, 2.0, 2.0]]


def test_config_accepts_stare_and_erpo_on_the_causal_lm():
    config = arith_lm_config(
        credit=[{"name": "entropy_critical_tokens", "variant": "C2"}, {"name": "entropy_pivots", "buckets": 4}],
    )
    assert "entropy" in config.algorithm.needs()
