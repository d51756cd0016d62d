"""Rollout budgets of genalign.sampling.budgets: the max-variance subset and D³S's sample-level down-sampling [27]
(GFPO is tested in test_rules.py)."""

from __future__ import annotations

import itertools

import pytest
import torch

from genalign.experimental.sampling.budgets import D3SSamples
from genalign.sampling.budgets import max_variance_subset
from tests.sampling.test_rules import outcome


def test_max_variance_subset_takes_the_extremes_with_hand_computed_ties():
    values = torch.tensor([0.2, 1.0, 0.5, 0.0, 0.9, 0.1], dtype=torch.float64)
    assert max_variance_subset(values, 2).tolist() == [1, 3]  # {1.0, 0.0}
    # k = 3: {0.0, 0.9, 1.0} and {0.0, 0.1, 1.0} both have variance 0.20222; the split with fewer low values wins
    assert max_variance_subset(values, 3).tolist() == [1, 3, 4]
    assert max_variance_subset(torch.tensor([1.0, 1.0, 1.0, 1.0]), 2).tolist() == [0, 1]  # all equal: the first k
    assert max_variance_subset(torch.tensor([0.0, 0, 0, 0, 1, 0]), 4).tolist() == [0, 1, 2, 4]  # balanced, earliest
    assert max_variance_subset(values, 6).tolist() == list(range(6))


def test_max_variance_subset_equals_brute_force():
    generator = torch.Generator().manual_seed(3)
    for _ in range(30):
        values = torch.randint(0, 5, (7,), generator=generator).double() / 4
        for k in range(2, 7):
            got = float(values[max_variance_subset(values, k)].var(unbiased=False))
            best = max(float(values[list(c)].var(unbiased=False)) for c in itertools.combinations(range(7), k))
            assert got == pytest.approx(best, abs=1e-12)


@pytest.mark.parametrize(("progress", "kept", "fraction"), [(0.0, [1, 3, 4, 6], 0.5), (0.375, [0, 1, 3, 4, 5, 6], 0.75),
                                                            (0.9, list(range(8)), 1.0)])  # fmt: skip
def test_d3s_keeps_the_max_variance_rollouts_on_an_annealed_schedule(progress, kept, fraction):
    rule = D3SSamples(start_fraction=0.5, relax_until=0.75, min_keep=2)
    seen = outcome([0] * 4 + [1] * 4, [0] * 8, [0.2, 1.0, 0.5, 0.0, 1.0, 1.0, 0.0, float("nan")])
    seen.progress = progress
    decision = rule.after_rewards(seen)
    # group 0: k = ⌈ρ·4⌉ of (0.2, 1.0, 0.5, 0.0): k = 3 keeps {0.0, 0.2, 1.0} (variance 0.1867 > 0.1667 of
    # {0.0, 0.5, 1.0}); group 1: (1, 1, 0, no reward): the rewarded ones first, the earliest 1 with the 0
    assert decision.keep.nonzero().flatten().tolist() == kept
    assert decision.stats["keep_fraction"] == pytest.approx(fraction)
    assert decision.train is None


def test_d3s_validates_its_schedule():
    with pytest.raises(ValueError, match="start_fraction = 0"):
        D3SSamples(start_fraction=0)
    with pytest.raises(ValueError, match="min_keep = 1"):
        D3SSamples(min_keep=1)
