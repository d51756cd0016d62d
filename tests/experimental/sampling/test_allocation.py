"""Extra sampling rounds of genalign.experimental.sampling.allocation (DARS [192], AERO [234], XRPO [241]) on hand-computed
outcomes (no training)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from genalign.experimental.sampling.allocation import (
    AERO,
    DARS,
    XRPOAllocator,
    dead_zone_probability,
    half_width,
    student_t_quantile,
)
from genalign.policies.base import GUIDANCE_KEY
from tests.sampling.test_rules import candidates, outcome

ROUND0 = ([10] * 4 + [11] * 4 + [12] * 4, [0] * 4 + [1] * 4 + [2] * 4, [1, 0, 0, 0] + [0] * 4 + [1, 1, 0, 0])


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        # a = 0.25, n = 4: n' = 4/(2·√0.1875) = 4.62 -> 1 more; a = 0: the cap; a = 0.5: none
        ("equal_treatment", {10: 1, 11: 5}),
        # n' = 4·√(0.75/0.25) = 6.93 -> 3 more
        ("hardness_weighted", {10: 3, 11: 5}),
    ],
)
def test_dars_gives_hard_prompts_extra_rollouts(schedule, expected):
    rule = DARS(schedule=schedule, max_extra=5)
    assert rule.rounds == 2 and rule.samples_per_prompt(4) is None
    assert rule.more_samples(outcome(*ROUND0)) == expected


def test_dars_schedules_by_hand():
    rule = DARS(max_extra=100)
    assert rule.extra(0.125, 8) == 5  # 8/(2·√(0.125·0.875)) = 12.09 -> ⌈4.09⌉
    assert DARS(schedule="hardness_weighted", max_extra=100).extra(0.125, 8) == 14  # 8·√7 = 21.17 -> ⌈13.17⌉
    assert DARS(threshold=0.3).extra(0.25, 4) == 1 and DARS(threshold=0.2).extra(0.25, 4) == 0
    with pytest.raises(ValueError, match="schedule = 'linear'"):
        DARS(schedule="linear")


def test_dars_reports_the_accuracy_of_the_extended_prompts():
    rule = DARS(max_extra=2)
    rule.samples_per_prompt(4)
    positions, indices, rewards = ROUND0
    stats = rule.after_rewards(outcome([*positions, 10, 11, 11], [*indices, 0, 1, 1], [*rewards, 1, 0, 0])).stats
    assert stats["prompts_extended"] == 2.0
    assert stats["accuracy_extended"] == pytest.approx((2 / 5 + 0.0) / 2)
    assert stats["accuracy_others"] == pytest.approx(0.5)


def test_aero_dead_zone_is_the_beta_binomial_probability_of_an_all_equal_group():
    assert dead_zone_probability(1.0, 1.0, 4) == pytest.approx(2 / 5)  # uniform prior: 2/(n+1)
    all_fail = (4.5 / 5) * (5.5 / 6) * (6.5 / 7) * (7.5 / 8)
    all_pass = (0.5 / 5) * (1.5 / 6) * (2.5 / 7) * (3.5 / 8)
    assert dead_zone_probability(0.5, 4.5, 4) == pytest.approx(all_fail + all_pass)


def test_aero_sizes_extra_rollouts_from_the_posterior():
    rule = AERO(discount=0.5, prior=1.0, break_probability=0.5, max_extra=8)
    rule.samples_per_prompt(4)
    # prompt 0 failed 4 of 4: posterior (0.5·1 + 0, 0.5·1 + 4), p̃ = 0.1: k = ⌈log 0.5 / log 0.9⌉ = 7;
    # prompt 1 succeeded 4 of 4: p_break = 1 − 0.9; prompt 2 is mixed
    seen = outcome([0] * 4 + [1] * 4 + [2] * 4, [0] * 4 + [1] * 4 + [2] * 4, [0] * 4 + [1] * 4 + [1, 0, 1, 1])
    assert rule.more_samples(seen) == {0: 7, 1: 7}
    assert rule.alpha == {}  # no state change before after_rewards
    assert AERO(discount=0.5, break_probability=0.9, max_extra=8).more_samples(seen) == {0: 8, 1: 8}  # 22 capped


def test_aero_selective_rejection_and_posterior_update():
    rule = AERO(discount=0.5, prior=1.0)
    rule.samples_per_prompt(4)
    seen = outcome([0] * 6 + [1] * 3, [5] * 6 + [6] * 3, [0, 0, 0, 0, 1, 0, 1, 0, 1])
    decision = rule.after_rewards(seen)
    # group 0 grew to 6: keep the only success and the first three failures; group 1 has no more than G
    assert decision.keep.tolist() == [True, True, True, False, True, False, True, True, True]
    assert (rule.alpha[5], rule.beta[5]) == pytest.approx((0.5 + 1, 0.5 + 5))
    assert (rule.alpha[6], rule.beta[6]) == pytest.approx((0.5 + 2, 0.5 + 1))
    assert decision.stats["frac_degenerate"] == 0.0
    fresh = AERO()
    fresh.load_state_dict(json.loads(json.dumps(rule.state_dict())))
    assert (fresh.alpha, fresh.beta, fresh.skips) == (rule.alpha, rule.beta, rule.skips)


def test_aero_skips_dead_zone_prompts_until_max_skips():
    rule = AERO(skip_above=0.9, max_skips=1)
    rule.samples_per_prompt(4)
    rule.alpha, rule.beta = {3: 0.1}, {3: 20.0}  # almost surely all failures
    pool = candidates(3, 4)
    assert [c.index for c in rule.choose(pool, 2, torch.Generator())] == [4]
    assert [c.index for c in rule.choose(pool, 2, torch.Generator())] == [3, 4]  # skipped once: back in
    assert rule.after_rewards(outcome([100, 100], [3, 3], [0, 0])).stats["skipped"] == 1.0
    assert rule.skips[3] == 0


def test_student_t_quantile_matches_the_table():
    assert student_t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-4)
    assert student_t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-4)
    assert student_t_quantile(0.975, 3) == pytest.approx(3.1824, abs=5e-3)
    assert student_t_quantile(0.975, 10) == pytest.approx(2.2281, abs=1e-3)
    assert student_t_quantile(0.95, 30) == pytest.approx(1.6973, abs=1e-3)
    assert half_width(0.5, 4, 0.95) == pytest.approx(student_t_quantile(0.975, 3) * 0.5 / 2)
    assert half_width(0.0, 4, 0.95) == 0.0


def test_xrpo_allocates_the_budget_to_the_largest_uncertainty_reduction():
    # prompt 0: rewards 0,1,0,1 (s = 0.577); prompt 1: 1,1,1,0 (s = 0.5); prompt 2: all 0 (s = 0)
    seen = outcome([0] * 4 + [1] * 4 + [2] * 4, [0] * 12, [0, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0])
    rule = XRPOAllocator(budget=1.0, exploration=0.0, max_extra=2)  # 3 extra samples
    s0, s1 = math.sqrt(1 / 3), 0.5

    def shrink(s, n):
        return half_width(s, n, 0.95) - half_width(s, n + 1, 0.95)

    assert shrink(s0, 4) > shrink(s1, 4) > shrink(s0, 5)  # order of the greedy picks: 0, 1, then 0 or 1
    third = 0 if shrink(s0, 5) > shrink(s1, 5) else 1
    expected = {0: 1, 1: 1}
    expected[third] += 1
    assert rule.more_samples(seen) == expected
    assert XRPOAllocator(budget=2.0, exploration=0.0, max_extra=2).more_samples(seen) == {0: 2, 1: 2, 2: 2}
    bonus = XRPOAllocator(budget=0.34, exploration=1.0)  # one sample: the bonus √(ln 12 / 4) is equal for all
    assert bonus.priority(0.0, 4, 12) == pytest.approx(math.sqrt(math.log(12) / 4))
    assert bonus.more_samples(seen) == {0: 1}


def test_xrpo_seeds_unsolved_prompts_with_an_exemplar_hint():
    rule = XRPOAllocator(hint_column="exemplar")
    assert rule.needs_guidance == frozenset({"hint"}) and XRPOAllocator().needs_guidance == frozenset()
    rule.after_rewards(outcome([0, 0, 1, 1], [3, 3, 4, 4], [0, 0, 0, 1]))
    assert rule.unsolved == {3}
    pool = candidates(3, 4)
    pool[0].row["exemplar"] = "Q: 1+1? A: 2"
    pool[1].row["exemplar"] = "unused"
    chosen = rule.choose(pool, 2, torch.Generator())
    assert chosen[0].row[GUIDANCE_KEY] == {"hint": "Q: 1+1? A: 2"} and GUIDANCE_KEY not in chosen[1].row
    fresh = XRPOAllocator(hint_column="exemplar")
    fresh.load_state_dict(json.loads(json.dumps(rule.state_dict())))
    assert fresh.unsolved == {3}
    rule.after_rewards(outcome([2, 2], [3, 3], [0, 1]))
    assert rule.unsolved == set()
