"""V_0-style budget allocation [137] (``value_budget``): state-zero predictions from the history of similar prompts,
the greedy split of the step's sampling budget, and the history's checkpoint (no training)."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.experimental.sampling.value_budget import (
    ValueBudget,
    allocate,
    informative_probability,
    predicted_success,
    prompt_features,
)
from genalign.sampling.base import Candidate
from genalign.trainer.state_io import load_state, save_state
from tests.sampling.test_rules import outcome

F64 = torch.float64


def test_prompt_features_are_unit_hashed_ngrams():
    a = prompt_features("What is 12 + 7?", size=64, ngram=3)
    chat = prompt_features([{"role": "user", "content": "what  is 12 + 7?"}], size=64, ngram=3)
    torch.testing.assert_close(a, chat)  # case and spacing do not matter, chat text is read
    assert a.norm().item() == pytest.approx(1.0)
    assert prompt_features("ab", size=8, ngram=3).abs().sum().item() == 0.0  # shorter than one n-gram


def test_prediction_is_a_kernel_weighted_mean_of_similar_prompts_shrunk_to_the_history_mean():
    history = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=F64)
    successes = torch.tensor([1.0, 0.0, 0.5], dtype=F64)
    query = torch.tensor([[1.0, 0.0]], dtype=F64)
    # two nearest: the same prompt (cos 1, k = 1) and [0.6, 0.8] (cos 0.6, k = e^{−4}); prior α = 1 on s̄ = 0.5
    k = math.exp(-0.4 / 0.1)
    expected = (1.0 * 1.0 + k * 0.5 + 1.0 * 0.5) / (1.0 + k + 1.0)
    got = predicted_success(query, history, successes, neighbours=2, temperature=0.1, prior=1.0)
    torch.testing.assert_close(got, torch.tensor([expected], dtype=F64))
    empty = predicted_success(query, history[:0], successes[:0], neighbours=2, temperature=0.1, prior=1.0)
    torch.testing.assert_close(empty, torch.tensor([0.5], dtype=F64))  # no history yet: ½


def test_the_budget_goes_where_an_informative_group_becomes_likelier():
    assert informative_probability(0.5, 2) == pytest.approx(0.5)
    # base 2, budget 4: p = 0.5 (already informative half the time), 0.9 and 0.02
    # gains: p=.5: .25 (n 2->3); p=.9: I(3)−I(2) = .27−.18 = .09; p=.02: .0588−.0392 = .0196 ...
    assert allocate([0.5, 0.9, 0.02], base=2, budget=4, max_extra=10) == [2, 2, 0]
    assert allocate([0.5, 0.9, 0.02], base=2, budget=4, max_extra=1) == [1, 1, 1]
    assert allocate([0.0, 1.0], base=2, budget=3, max_extra=5) == [0, 0]  # certain prompts get nothing


def test_the_rule_predicts_before_the_rollout_and_learns_after_the_rewards():
    rule = ValueBudget(base_samples=2, feature_size=64, prior_strength=0.1)
    assert rule.rounds == 2 and rule.samples_per_prompt(4) == 2
    pool = [Candidate(10, 0, {"prompt": "add 1 and 2"}), Candidate(11, 1, {"prompt": "multiply 9 by 7"})]
    assert rule.choose(pool, 2, torch.Generator()) == pool
    round0 = outcome([10, 10, 11, 11], [0, 0, 1, 1], [1.0, 1.0, 0.0, 1.0])
    # no history: both predicted ½; budget (4 − 2)·2 = 4 split evenly by the greedy gains
    assert rule.more_samples(round0) == {10: 2, 11: 2}
    stats = rule.after_rewards(outcome([10] * 4 + [11] * 4, [0] * 4 + [1] * 4, [1, 1, 1, 1, 0, 1, 0, 1])).stats
    assert stats["history"] == 2.0 and stats["prediction_error"] == pytest.approx(0.5 * (0.5 + 0.0))
    # the same prompts again: "add 1 and 2" was always solved (p̂ ≈ 0.98), "multiply 9 by 7" half the time
    # (p̂ ≈ 0.52): every extra sample goes to the second, whose group it makes informative far more likely
    rule.choose([Candidate(20, 0, {"prompt": "add 1 and 2"}), Candidate(21, 1, {"prompt": "multiply 9 by 7"})], 2,
                torch.Generator())  # fmt: skip
    solved = rule.predict(prompt_features("add 1 and 2", size=64, ngram=3)[None])
    assert solved.item() == pytest.approx((1.0 + 0.1 * 0.75) / 1.1, abs=1e-3)
    assert rule.more_samples(outcome([20, 20, 21, 21], [0, 0, 1, 1], [1.0, 1.0, 1.0, 0.0])) == {21: 4}


def test_history_is_bounded_and_checkpointed(tmp_path):
    rule = ValueBudget(base_samples=2, history=2, feature_size=16)
    rule.samples_per_prompt(2)
    for step in range(3):
        rule.choose([Candidate(step, step, {"prompt": f"prompt {step}"})], 1, torch.Generator())
        rule.after_rewards(outcome([step, step], [step, step], [float(step % 2), 0.0]))
    assert rule.history.shape == (2, 16) and rule.successes.tolist() == [0.5, 0.0]
    save_state(rule.state_dict(), tmp_path / "rule")
    fresh = ValueBudget(base_samples=2, history=2, feature_size=16)
    fresh.load_state_dict(load_state(tmp_path / "rule"))
    torch.testing.assert_close(fresh.history, rule.history)
    torch.testing.assert_close(fresh.successes, rule.successes)


def test_bad_arguments():
    with pytest.raises(ValueError, match="base_samples = 1 must be an integer >= 2"):
        ValueBudget(base_samples=1)
    with pytest.raises(ValueError, match=r"exceeds algorithm\.group_size = 4"):
        ValueBudget(base_samples=6).samples_per_prompt(4)
    with pytest.raises(ValueError, match="similarity_temperature > 0"):
        ValueBudget(similarity_temperature=0.0)
