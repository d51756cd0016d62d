"""RC-GRPO's reward-conditioned groups [128] (``reward_goals``): each group's samples are split over the goals, the
first goal is attached when the prompt is planned and each later round draws the next goal's share with that goal
in place of it; then one training step on the arithmetic demo where each group holds both goals."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.config import ConfigError, from_dict
from genalign.config.schema import TrainConfig
from genalign.experimental.sampling.reward_goals import split_group
from genalign.experimental.sampling.tokens import PolicyTokens
from genalign.policies.base import GUIDANCE_KEY
from genalign.policies.lm.causal import CausalLMPolicy
from genalign.sampling import SAMPLE_SOURCES, Candidate
from genalign.trainer import recipe
from tests.experimental.sampling.test_exits import ids, outcome

GEN = torch.Generator()
TOKENS = PolicyTokens("builtin:arith-lm", "test")


def test_the_group_is_split_over_the_goals_first_goals_first():
    assert split_group(5, 2) == [3, 2]
    assert split_group(7, 3) == [3, 2, 2]
    assert split_group(4, 4) == [1, 1, 1, 1]


def test_each_round_draws_the_next_goals_share_with_that_goal_in_the_prompt():
    rule = SAMPLE_SOURCES.get("reward_goals")(goals=["+", "-", "="], template=" {goal}")
    assert rule.rounds == 3 and rule.samples_per_prompt(7) == 3
    rows = [{"prompt": "1+2="}, {"prompt": "3+4=", GUIDANCE_KEY: {"hint": "9"}}]
    chosen = rule.choose([Candidate(p, p + 100, row) for p, row in enumerate(rows)], 2, GEN)
    assert [c.row[GUIDANCE_KEY] for c in chosen] == [{"hint": " +"}, {"hint": "9 +"}]
    assert GUIDANCE_KEY not in rows[0]  # the stream's row is not changed
    drawn = outcome([(p, ids("A:1"), torch.zeros(4), False) for p in (0, 0, 0, 1, 1, 1)], step=1)
    drawn.round = 0
    assert rule.more_samples(drawn) == {0: 2, 1: 2}
    assert rule.round_guidance(drawn) == {0: {"hint": " -"}, 1: {"hint": "9 -"}}  # replaces the first goal
    drawn.round = 1
    assert rule.round_guidance(drawn) == {0: {"hint": " ="}, 1: {"hint": "9 ="}}
    drawn.round = 2
    assert rule.more_samples(drawn) == {} and rule.round_guidance(drawn) == {}
    # prompt 0's seven samples in round order: 3 of goal "+", 2 of "-", 2 of "="; a forced sample has no goal
    samples = [(0, ids("A:1"), torch.zeros(4), False)] * 7 + [(0, ids("A:1"), torch.zeros(4), True)]
    after = outcome(samples, rewards=[1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    assert rule.goal_of_samples(after) == [0, 0, 0, 1, 1, 2, 2, -1]
    stats = rule.after_rewards(after).stats
    assert stats == {"goal0_reward": pytest.approx(2 / 3), "goal1_reward": 0.5, "goal2_reward": 0.0}


def test_bad_goals_and_a_group_smaller_than_the_goals_are_refused():
    with pytest.raises(ValueError, match="goals = \\['a', 'a'\\]"):
        SAMPLE_SOURCES.get("reward_goals")(goals=["a", "a"])
    base = {
        "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_new_tokens": 4},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "digits": 1}}},
        "rewards": [{"fn": "exact_match"}],
    }
    sources = [{"name": "reward_goals", "goals": ["+", "-", "="]}]
    with pytest.raises(ConfigError, match="group_size = 2 is smaller than the 3 goals"):
        from_dict(TrainConfig, {**base, "algorithm": {"group_size": 2, "sample_sources": sources}})


def test_each_group_trains_on_both_goals(tmp_path, monkeypatch):
    calls = []
    real = CausalLMPolicy.rollout

    def spy(self, rows, group_size, **kwargs):
        rollout = real(self, rows, group_size, **kwargs)
        calls.append((group_size, [row[GUIDANCE_KEY]["hint"] for row in rows], rollout.per_sample["prompt_ids"]))
        return rollout

    monkeypatch.setattr(CausalLMPolicy, "rollout", spy)
    config = from_dict(TrainConfig, {
        "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_prompt_tokens": 16, "max_new_tokens": 5},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8, "seed": 0, "digits": 2}}},
        "rewards": [{"fn": "exact_match", "name": "accuracy"}],
        "algorithm": {"group_size": 4, "prompts_per_step": 2, "micro_batch_size": 16,
                      "sample_sources": [{"name": "reward_goals", "goals": ["+", "-"], "template": " {goal}"}]},
        "eval": {"at_start": False, "every": 0},
        "run": {"output_dir": str(tmp_path / "run"), "max_steps": 1, "progress_bar": False, "num_threads": 1},
    })  # fmt: skip
    recipe.train(config)
    (first, high, high_ids), (second, low, low_ids) = calls
    assert (first, high, second, low) == (2, [" +", " +"], 1, [" -"] * 4)
    plus, minus = (TOKENS.encode(goal)[0] for goal in "+-")
    assert high_ids[:, -1].tolist() == [plus] * 4 and low_ids[:, -1].tolist() == [minus] * 4  # each prompt ends so
    record = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert record["num_samples"] == 8 and record["sampling/extra_samples"] == 4.0
    assert {"sampling/reward_goals/goal0_reward", "sampling/reward_goals/goal1_reward"} <= set(record)
