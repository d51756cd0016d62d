"""Turn-level uncertainty credit (genalign/experimental/credit/turn_uncertainty.py), hand-computed on the batch of
:mod:`tests.experimental.credit.turn_batches`: AEM [231] per turn and T²PO's turn-progress gate [171]."""

from __future__ import annotations

import pytest

from genalign.algorithms import apply_credit
from tests.experimental.credit.turn_batches import close, t, turn_batch

# per-turn surprisal −mean logπ_old: s0 (0.5, 2), s1 (1.5, 1), s2 (1), s3 (1, 3, 1)
BEHAVIOUR_LOGP = [[-0.5, -0.5, 0.0, -2.0, 0.0, 0.0], [-1.5, 0.0, -1.0, -1.0, -1.0, 0.0],
                  [-1.0, -1.0, -1.0, 0.0, 0.0, 0.0], [-1.0, 0.0, -3.0, 0.0, -1.0, -1.0]]  # fmt: skip


def test_aem_turns_weights_each_turn_by_its_confidence_relative_to_the_same_turn_of_the_group():
    # group 0: turn 0 ū = 1 -> w = (2, 2/3); turn 1 ū = 1.5 -> w = (0.75, 1.5); group 1: turn 0 (1, 1) -> 1, lone turns 1
    batch = turn_batch(behaviour_logp=t(BEHAVIOUR_LOGP))
    out = apply_credit([("aem_turns", {})], batch["sample_advantages"], batch)
    close(out, [[2.0, 2.0, 1.0, 0.75, 1.0, 1.0], [-2 / 3, -1.0, -1.5, -1.5, -1.5, -1.0], [0.5] * 6, [-0.5] * 6])
    clamped = apply_credit([("aem_turns", {"weight_max": 1.6, "weight_min": 0.7})], batch["sample_advantages"], batch)
    close(clamped[0, [0, 3]], [1.6, 0.75])
    close(clamped[1, [0, 2]], [-0.7, -1.5])
    flat = apply_credit([("aem_turns", {"power": 0.0})], batch["sample_advantages"], batch)
    close(flat, [[1.0] * 6, [-1.0] * 6, [0.5] * 6, [-0.5] * 6])


def test_turn_progress_gate_drops_turns_whose_entropy_barely_moves():
    # mean entropy per turn: s0 (1, 1.02) -> turn 1 stalled; s1 (1, 2); s2 (1); s3 (1, 1.5, 1.52) -> turn 2 stalled
    entropy = t([[1.0, 1.0, 0.0, 1.02, 0.0, 0.0], [1.0, 0.0, 2.0, 2.0, 2.0, 0.0],
                 [1.0, 1.0, 1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 1.5, 0.0, 1.52, 1.52]])  # fmt: skip
    batch = turn_batch(entropy=entropy)
    out = apply_credit([("turn_progress_gate", {"keep": 0.25})], batch["sample_advantages"], batch)
    close(out, [[1.0, 1.0, 1.0, 0.25, 1.0, 1.0], [-1.0] * 6, [0.5] * 6, [-0.5, -0.5, -0.5, -0.5, -0.125, -0.125]])
    dropped = apply_credit([("turn_progress_gate", {"threshold": 0.6})], batch["sample_advantages"], batch)
    close(dropped[3], [-0.5, -0.5, 0.0, -0.5, 0.0, 0.0])  # Δ 0.5 and 0.02 both below 0.6; env token kept
    with pytest.raises(ValueError, match=r"keep in \[0, 1\].*keep=2"):
        apply_credit([("turn_progress_gate", {"keep": 2})], batch["sample_advantages"], batch)
