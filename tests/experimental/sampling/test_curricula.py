"""Prompt-selection rules of genalign.experimental.sampling.boundaries (AdaGRPO, VAS) and genalign.experimental.sampling.residuals (ERPO) on
hand-computed outcomes (no training)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from genalign.experimental.sampling.boundaries import AdaGRPOCurriculum, VarianceAwareSampling, distinct_ngram_ratio
from genalign.experimental.sampling.residuals import ERPOTemperature
from genalign.policies.base import GUIDANCE_KEY
from genalign.sampling import Outcome
from tests.sampling.test_rules import candidates, outcome


def with_tokens(positions, indices, rewards, tokens) -> Outcome:
    """An outcome whose samples carry action ids (rows of ``tokens``, 0 = padding)."""
    width = max(len(t) for t in tokens)
    padded = torch.tensor([t + [0] * (width - len(t)) for t in tokens])  # [N, T]
    base = outcome(positions, indices, rewards, lengths=[len(t) for t in tokens])
    base.tokens, base.behaviour_logp = padded, torch.zeros(padded.shape)
    return base


def pick_rate(rule, pool, index, draws=4000, wanted=1) -> float:
    generator = torch.Generator().manual_seed(0)
    picks = [c.index for _ in range(draws) for c in rule.choose(pool, wanted, generator)[:1]]
    return picks.count(index) / draws


def test_adagrpo_tracks_proficiency_and_favours_the_learning_boundary():
    rule = AdaGRPOCurriculum(boundary=0.5, width=0.2, momentum=0.5, epsilon=0.01)
    stats = rule.after_rewards(outcome([0] * 4, [7] * 4, [1, 1, 0, 1])).stats
    assert rule.proficiency == {7: 0.75}  # first visit: the group's mean
    assert stats["global_proficiency"] == pytest.approx(0.75) and stats["boundary_distance"] == pytest.approx(0.25)
    rule.after_rewards(outcome([1] * 4, [7] * 4, [0, 0, 0, 0]))
    assert rule.proficiency[7] == pytest.approx(0.5 * 0.75 + 0.5 * 0.0)  # 0.375
    assert rule.priority(7) == pytest.approx(math.exp(-(0.125**2) / (2 * 0.2**2)) + 0.01)
    assert rule.priority(99) == pytest.approx(1.01)  # never seen: on the boundary
    rule.proficiency[3] = 1.0  # mastered: exp(-0.25 / 0.08) + 0.01
    mastered = math.exp(-0.25 / 0.08) + 0.01
    assert pick_rate(rule, candidates(3, 99), 3) == pytest.approx(mastered / (mastered + 1.01), abs=0.02)
    assert len(rule.choose(candidates(3, 99), 2, torch.Generator())) == 2  # nothing to choose between


def test_adagrpo_rescales_rewards_of_other_ranges_and_round_trips_its_state():
    rule = AdaGRPOCurriculum(reward_range=[0.0, 10.0], momentum=0.0)
    rule.after_rewards(outcome([0, 0], [4, 4], [5.0, 10.0]))
    assert rule.proficiency == {4: pytest.approx(0.75)}
    fresh = AdaGRPOCurriculum()
    fresh.load_state_dict(json.loads(json.dumps(rule.state_dict())))
    assert fresh.proficiency == rule.proficiency
    with pytest.raises(ValueError, match=r"reward_range = \[1\.0, 1\.0\]"):
        AdaGRPOCurriculum(reward_range=[1.0, 1.0])
    with pytest.raises(ValueError, match="width = 0"):
        AdaGRPOCurriculum(width=0)


def test_distinct_ngram_ratio_pools_the_group():
    assert distinct_ngram_ratio([torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4])], 2) == 0.75  # (1,2) twice
    assert distinct_ngram_ratio([torch.tensor([5, 6])] * 2, 2) == 0.5  # identical completions
    assert distinct_ngram_ratio([torch.tensor([5])], 2) == 1.0  # shorter than n: one gram of itself


def test_vas_scores_outcome_variance_plus_trajectory_diversity():
    rule = VarianceAwareSampling(variance_weight=1.0, diversity_weight=1.0, ngram=2, momentum=0.5)
    assert rule.needs_tokens
    seen = with_tokens([0, 0, 1, 1], [3, 3, 4, 4], [1, 0, 1, 1], [[1, 2, 3], [1, 2, 4], [5, 6], [5, 6]])
    stats = rule.after_rewards(seen).stats
    assert rule.success == {3: 0.5, 4: 1.0} and rule.diversity == {3: 0.75, 4: 0.5}
    assert rule.score(3) == pytest.approx(4 * 0.25 + 0.75)  # 1.75
    assert rule.score(4) == pytest.approx(0.0 + 0.5)
    assert rule.score(9) == pytest.approx(2.0)  # never seen: the largest score
    assert stats["vps_mean"] == pytest.approx((1.75 + 0.5) / 2)
    rule.after_rewards(with_tokens([2, 2], [3, 3], [1, 1], [[7, 8], [7, 9]]))  # success 1, diversity 1
    assert rule.success[3] == pytest.approx(0.75) and rule.diversity[3] == pytest.approx(0.875)
    fresh = VarianceAwareSampling()
    fresh.load_state_dict(json.loads(json.dumps(rule.state_dict())))
    assert (fresh.success, fresh.diversity) == (rule.success, rule.diversity)


def test_vas_draws_by_score_then_uniformly():
    rule = VarianceAwareSampling(diversity_weight=0.0, epsilon=0.01)
    assert not rule.needs_tokens  # outcome variance only: any family
    rule.success = {1: 0.5, 2: 0.9}  # scores 1.0 and 4 * 0.09 = 0.36
    pool = candidates(1, 2)
    scored = VarianceAwareSampling(diversity_weight=0.0, mixture=1.0)
    scored.success = dict(rule.success)
    assert pick_rate(scored, pool, 1) == pytest.approx(1.01 / (1.01 + 0.37), abs=0.02)
    uniform = VarianceAwareSampling(diversity_weight=0.0, mixture=0.0)
    uniform.success = dict(rule.success)
    assert pick_rate(uniform, pool, 1) == pytest.approx(0.5, abs=0.03)
    chosen = rule.choose(candidates(1, 2, 3, 4), 2, torch.Generator().manual_seed(1))  # 1 by score + 1 uniform
    assert len(chosen) == 2 and len({c.index for c in chosen}) == 2


def test_erpo_raises_the_temperature_of_residual_prompts():
    rule = ERPOTemperature(base_temperature=1.0, temperature_step=0.2, max_temperature=1.3, max_level=3)
    assert rule.needs_guidance == frozenset({"temperature"})
    rule.after_rewards(outcome([0, 0, 1, 1], [5, 5, 6, 6], [1, 1, 1, 0]))  # 5 all correct, 6 not
    assert rule.levels == {5: 1} and rule.temperature(5) == pytest.approx(1.2) and rule.temperature(6) is None
    pool = candidates(5, 6)
    pool[0].row[GUIDANCE_KEY] = {"hint": "look at the units"}
    chosen = rule.choose(pool, 2, torch.Generator())
    assert chosen[0].row[GUIDANCE_KEY] == {"hint": "look at the units", "temperature": pytest.approx(1.2)}
    assert chosen[0].position == pool[0].position and chosen[1] is pool[1]  # not residual: untouched
    assert GUIDANCE_KEY in pool[0].row and pool[0].row[GUIDANCE_KEY] == {"hint": "look at the units"}
    stats = rule.after_rewards(outcome([2, 2], [5, 5], [1, 1])).stats
    assert rule.temperature(5) == pytest.approx(1.3)  # 1.4 capped at max_temperature
    assert stats["sampled_hot"] == 1.0
    rule.after_rewards(outcome([3, 3], [5, 5], [1, float("nan")]))  # valid rewards all correct: level 3
    assert rule.levels[5] == 3
    fresh = ERPOTemperature()
    fresh.load_state_dict(json.loads(json.dumps(rule.state_dict())))
    assert fresh.levels == {5: 3}
    rule.after_rewards(outcome([4, 4], [5, 5], [1, 0.5]))  # an incorrect response: back to the normal temperature
    assert rule.temperature(5) is None and rule.levels == {}


def test_erpo_rejects_a_ceiling_below_the_base():
    with pytest.raises(ValueError, match=r"max_temperature = 0\.9 must be >= base_temperature = 1\.0"):
        ERPOTemperature(max_temperature=0.9)
