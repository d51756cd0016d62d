"""Each sample-source rule's mechanism on hand-computed outcomes (no training)."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.experimental.sampling.curricula import DEPO, SPOTracker
from genalign.experimental.sampling.masking import ConditionalOverlongFilter
from genalign.sampling import Candidate, Outcome, per_prompt
from genalign.sampling.budgets import GFPO
from genalign.sampling.masking import OverlongFilter

NAN = float("nan")


def outcome(positions, indices, rewards, lengths=None, truncated=None) -> Outcome:
    n = len(positions)
    return Outcome(
        positions=torch.tensor(positions),
        indices=torch.tensor(indices),
        rewards=torch.tensor(rewards, dtype=torch.float64),
        lengths=torch.tensor(lengths if lengths is not None else [1.0] * n, dtype=torch.float64),
        truncated=None if truncated is None else torch.tensor(truncated),
        progress=0.5,
    )


def candidates(*indices: int) -> list[Candidate]:
    return [Candidate(position=100 + i, index=index, row={"prompt": str(index)}) for i, index in enumerate(indices)]


def test_per_prompt_groups_in_order_of_first_appearance_and_clamps_rewards():
    got = per_prompt(outcome([5, 5, 2, 2, 5], [9, 9, 4, 4, 9], [1.5, -0.5, 0.25, NAN, 1.0]))
    assert got.positions == [5, 2] and got.indices == [9, 4]
    assert got.valid == [3, 1]
    assert got.successes == pytest.approx([2.0, 0.25])  # 1.5 -> 1, -0.5 -> 0, 1.0
    assert got.mean == pytest.approx([2.0 / 3.0, 0.25])


def test_overlong_filter_takes_truncated_samples_out_of_the_loss():
    decision = OverlongFilter().after_rewards(
        outcome([1] * 4, [0] * 4, [1, 0, 1, 0], truncated=[False, True, False, True])
    )
    assert decision.keep is None  # they stay in the group statistics
    assert decision.train.tolist() == [True, False, True, False]
    assert decision.stats == {"frac_truncated": 0.5, "frac_masked": 0.5}


def test_conditional_overlong_filter_masks_only_while_truncation_is_rare():
    flags = [False, True, False, False]  # 25 % truncated
    masked = ConditionalOverlongFilter(max_fraction=0.3).after_rewards(
        outcome([1] * 4, [0] * 4, [0] * 4, truncated=flags)
    )
    assert masked.train.tolist() == [True, False, True, True] and masked.stats["masking"] is True
    kept = ConditionalOverlongFilter(max_fraction=0.2).after_rewards(
        outcome([1] * 4, [0] * 4, [0] * 4, truncated=flags)
    )
    assert kept.train.tolist() == [True] * 4 and kept.stats["frac_masked"] == 0.0
    with pytest.raises(ValueError, match="max_fraction"):
        ConditionalOverlongFilter(max_fraction=1.5)


def test_depo_estimates_difficulty_online_and_filters_before_the_rollout():
    depo = DEPO(easy=0.8, hard=0.1, momentum=0.5, max_skips=1)
    depo.after_rewards(outcome([0] * 4 + [1] * 2, [7] * 4 + [5] * 2, [1, 1, 0, 1, 0, 0]))
    assert depo.estimates == {7: 0.75, 5: 0.0}  # first visit: the group's mean
    depo.after_rewards(outcome([2] * 4, [7] * 4, [1, 1, 1, 1]))
    assert depo.estimates[7] == pytest.approx(0.5 * 0.75 + 0.5 * 1.0)  # 0.875 >= easy
    pool = candidates(7, 3, 5)  # too easy, never seen, too hard
    assert [c.index for c in depo.choose(pool, 3, torch.Generator())] == [3]
    assert depo.skips == {7: 1, 5: 1}
    assert [c.index for c in depo.choose(pool, 3, torch.Generator())] == [7, 3, 5]  # skipped max_skips times: back in
    stats = depo.after_rewards(outcome([3], [5], [0.5])).stats  # a visit resets the skip count
    assert depo.skips[5] == 0 and stats["skipped"] == 2.0 and stats["tracked"] == 2.0
    assert depo.estimates[5] == pytest.approx(0.25)


def test_depo_rejects_inconsistent_thresholds():
    with pytest.raises(ValueError, match=r"hard = 0\.5 must be below easy = 0\.4"):
        DEPO(easy=0.4, hard=0.5)


def test_spo_tracker_is_a_discounted_beta_posterior():
    spo = SPOTracker(discount=0.5, epsilon=0.05)
    spo.after_rewards(outcome([0] * 4, [3] * 4, [1, 0, 0, 0]))
    assert (spo.alpha[3], spo.beta[3]) == pytest.approx((2 * 0.25, 2 * 0.75))  # N_eff = 1 / (1 - 0.5) = 2
    spo.after_rewards(outcome([1, 1], [3, 3], [1.0, 1.0]))
    assert (spo.alpha[3], spo.beta[3]) == pytest.approx((0.5 * 0.5 + 2, 0.5 * 1.5 + 0))  # (2.25, 0.75)
    assert spo.value(3) == pytest.approx(0.75)
    assert spo.priority(3) == pytest.approx(math.sqrt(0.75 * 0.25) + 0.05)
    assert spo.value(99) == 0.5 and spo.priority(99) == pytest.approx(0.55)  # never seen: top priority


def test_spo_samples_prompts_in_proportion_to_their_priority():
    spo = SPOTracker(discount=0.5, epsilon=0.05)
    spo.alpha, spo.beta = {1: 9.0}, {1: 1.0}  # v = 0.9: priority 0.3 + 0.05 = 0.35; unseen prompt 2: 0.55
    pool = candidates(1, 2)
    generator = torch.Generator().manual_seed(0)
    picks = [spo.choose(pool, 1, generator)[0].index for _ in range(4000)]
    assert picks.count(1) / len(picks) == pytest.approx(0.35 / 0.9, abs=0.025)
    assert spo.choose(pool, 2, generator) == pool  # nothing to choose between


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        ("length", [1, 3, 4, 6]),  # group 10: lengths 3, 3 (ties keep order); group 11: 2, 4
        ("token_efficiency", [0, 1, 4, 6]),  # r/|o|: 0.2, 0.33, 0, 0 | 0.25, 0, 0.5, no reward
    ],
)
def test_gfpo_keeps_the_best_k_of_each_larger_group(metric, expected):
    gfpo = GFPO(samples=4, metric=metric)
    assert gfpo.samples_per_prompt(2) == 4
    got = outcome([10] * 4 + [11] * 4, [0] * 8, [1, 1, 0, 0, 1, 0, 1, NAN], lengths=[5, 3, 9, 3, 4, 8, 2, 6])
    decision = gfpo.after_rewards(got)
    assert decision.keep.nonzero().flatten().tolist() == expected
    assert decision.train is None
    assert decision.stats["length_mean_all"] == pytest.approx(5.0)


def test_adaptive_difficulty_gfpo_keeps_more_samples_of_harder_prompts():
    """Four prompts of 6 samples with mean rewards 0, 1/3, 2/3, 1: quartiles of the window [0, 1/3, 2/3, 1] are
    0.25 / 0.5 / 0.75, so the prompts fall in quartiles 0..3 and keep 5, 4, 3, 2 of their shortest samples."""
    gfpo = GFPO(samples=6, adaptive_k=[5, 4, 3, 2])
    assert gfpo.samples_per_prompt(2) == 6
    rewards = [0] * 6 + [1, 1, 0, 0, 0, 0] + [1, 1, 1, 1, 0, 0] + [1] * 6
    lengths = [6, 5, 4, 3, 2, 1] * 4  # the last samples of each group are the shortest
    decision = gfpo.after_rewards(outcome([p for p in range(4) for _ in range(6)], [0] * 24, rewards, lengths))
    kept = decision.keep.view(4, 6).sum(dim=1).tolist()
    assert kept == [5, 4, 3, 2]
    assert decision.keep.view(4, 6)[3].tolist() == [False] * 4 + [True] * 2  # the two shortest of the easiest
    assert decision.stats["kept_per_prompt"] == pytest.approx(3.5)
    # the window carries over (and through a checkpoint): an easy history makes a mean of 0.5 hard
    restored = GFPO(samples=6, adaptive_k=[5, 4, 3, 2])
    restored.load_state_dict({"difficulties": [0.9] * 8})
    assert restored.retained_counts([0.5, 0.95]) == [5, 2]  # quartiles of [0.9] * 8 + [0.5, 0.95]: all 0.9


def test_adaptive_difficulty_gfpo_rejects_counts_it_cannot_keep():
    with pytest.raises(ValueError, match=r"adaptive_k = \[8, 8, 6, 4\] must be four integers in \[2, samples = 8\)"):
        GFPO(samples=8, adaptive_k=[8, 8, 6, 4])


def test_gfpo_must_sample_more_than_it_keeps():
    with pytest.raises(ValueError, match=r"must exceed algorithm\.group_size = 8"):
        GFPO(samples=8).samples_per_prompt(8)
