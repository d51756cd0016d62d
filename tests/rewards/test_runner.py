"""call_reward: None -> NaN, output checks, errors named by reward and sample, or zeroed and counted."""

from __future__ import annotations

import math

import pytest

from genalign.rewards.runner import RewardOutputError, call_reward


def fails_on_b(prompts, completions, **columns):
    return [1 / 0 if c == "b" else float(len(c)) for c in completions]


def test_none_becomes_nan_and_columns_are_passed():
    def reward(prompts, completions, answer):
        return [None if a is None else float(c == a) for c, a in zip(completions, answer)]

    rewards, errors = call_reward("r", reward, ["p"] * 3, ["1", "2", "3"], {"answer": ["1", None, "0"]})
    assert errors == 0 and rewards[0] == 1.0 and math.isnan(rewards[1]) and rewards[2] == 0.0


def test_raising_reward_is_reported_with_name_and_sample_index():
    with pytest.raises(RuntimeError, match=r"reward 'len' failed on sample 1: ZeroDivisionError") as error:
        call_reward("len", fails_on_b, ["p"] * 3, ["a", "b", "cc"], {})
    assert isinstance(error.value.__cause__, ZeroDivisionError)


def test_raising_reward_can_be_zeroed_and_counted():
    rewards, errors = call_reward("len", fails_on_b, ["p"] * 4, ["a", "b", "cc", "b"], {}, on_error="zero")
    assert rewards == [1.0, 0.0, 2.0, 0.0] and errors == 2


@pytest.mark.parametrize("bad", [math.nan, math.inf, "0.5"])
def test_nan_inf_or_non_number_is_a_per_sample_failure(bad):
    def reward(prompts, completions):
        return [bad if c == "x" else 1.0 for c in completions]

    with pytest.raises(RuntimeError, match="failed on sample 1"):
        call_reward("r", reward, ["p"] * 2, ["ok", "x"], {})
    assert call_reward("r", reward, ["p"] * 2, ["ok", "x"], {}, on_error="zero") == ([1.0, 0.0], 1)


@pytest.mark.parametrize(("output", "message"), [([1.0], "returned 1 values for 2"), (0.5, "returned float")])
def test_wrong_output_shape_always_raises(output, message):
    with pytest.raises(RewardOutputError, match=message):
        call_reward("r", lambda prompts, completions: output, ["p"] * 2, ["a", "b"], {}, on_error="zero")


def test_numpy_and_bool_outputs_are_accepted():
    np = pytest.importorskip("numpy")
    assert call_reward("r", lambda p, c: np.array([0.5, 1.0]), ["p"] * 2, ["a", "b"], {}) == ([0.5, 1.0], 0)
    assert call_reward("r", lambda p, c: [True, False], ["p"] * 2, ["a", "b"], {}) == ([1.0, 0.0], 0)


def test_batch_only_failure_is_reported():
    def reward(prompts, completions):
        if len(completions) > 1:
            raise ValueError("batch too big")
        return [1.0]

    with pytest.raises(RuntimeError, match="every sample alone succeeds"):
        call_reward("r", reward, ["p"] * 2, ["a", "b"], {})


def test_argument_errors():
    with pytest.raises(ValueError, match="on_error='skip'"):
        call_reward("r", fails_on_b, ["p"], ["a"], {}, on_error="skip")
    with pytest.raises(ValueError, match="column 'answer' has 1 values for 2"):
        call_reward("r", fails_on_b, ["p"] * 2, ["a", "a"], {"answer": ["1"]})


def test_nan_at_some_positions_of_a_batch_is_never_rescored_away():
    """A batch call returning NaN at some positions: those samples fail (or count as errors), even when the reward
    would give a finite value for them one at a time."""
    calls = []

    def flaky(prompts, completions):
        calls.append(len(completions))
        return [math.nan if len(completions) > 1 and i % 2 else 1.0 for i in range(len(completions))]

    with pytest.raises(RuntimeError, match=r"failed on sample 1: .*returned nan"):
        call_reward("flaky", flaky, ["p"] * 4, ["a"] * 4, {})
    assert call_reward("flaky", flaky, ["p"] * 4, ["a"] * 4, {}, on_error="zero") == ([1.0, 0.0, 1.0, 0.0], 2)
    assert set(calls) == {4}, "no sample-by-sample re-scoring"


def test_rewards_large_enough_to_overflow_statistics_are_rejected():
    with pytest.raises(RuntimeError, match=r"failed on sample 0: .*1e\+38.*rescale"):
        call_reward("huge", lambda p, c: [1e38, 1.0], ["p"] * 2, ["a", "b"], {})
