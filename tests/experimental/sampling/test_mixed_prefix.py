"""SOUP's single-sample mixed policy [134] (``mixed_prefix``): a stored completion of an earlier step is cut after a
drawn share of its tokens and continued by the current policy, its prefix keeping the historical behaviour log-probs;
then training on the arithmetic demo, where a revisited prompt's mixed samples reach the update with the historical
log-probs on their prefix and the sampler's on their continuation."""

from __future__ import annotations

import dataclasses
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from genalign.experimental.sampling.mixed_prefix import prefix_length
from genalign.experimental.sampling.tokens import cut_generator
from genalign.sampling import SAMPLE_SOURCES, SampleSourceStage
from genalign.trainer import recipe
from tests.experimental.sampling.test_exits import ids, outcome
from tests.experimental.sampling.test_replay_training import records, train_killed_in_step


def test_the_prefix_keeps_at_least_one_historical_and_leaves_one_token_to_continue():
    assert prefix_length(10, 0.26) == 3 and prefix_length(10, 0.0) == 1 and prefix_length(10, 0.99) == 9
    assert prefix_length(2, 0.5) == 1


def test_a_revisited_prompt_gets_prefixes_of_its_stored_completions_continued_on_policy():
    rule = SAMPLE_SOURCES.get("mixed_prefix")(mixed=2, min_fraction=0.25, max_fraction=0.75)
    first = [ids("10+20=30\nA:30"), ids("A:7"), ids("1")]  # the 2-token "1<eos>" can be cut; "<eos>" alone not
    logp = [-torch.arange(1, t.shape[0] + 1).float() / 10 for t in first]
    step_one = outcome([(0, t, lp, False) for t, lp in zip(first, logp, strict=True)], step=1)
    assert rule.forced_samples(step_one) == []  # nothing stored yet
    rule.after_rewards(step_one)
    assert len(rule.buffer) == 3
    step_three = outcome([(5, ids("A:1"), torch.zeros(4), False)], step=3)
    step_three.indices = torch.tensor([100])  # the same data row at another stream position
    forced = rule.forced_samples(step_three)
    picks = first[1:]  # strategy recent: the two newest
    assert [(f.position, f.kind, f.continues) for f in forced] == [(5, "mixed", True)] * 2
    for pick, (item, tokens, lp) in enumerate(zip(forced, picks, logp[1:], strict=True)):
        draw = float(torch.rand((), generator=cut_generator(3, 100, salt=pick), dtype=torch.float64))
        k = prefix_length(tokens.shape[0], 0.25 + 0.5 * draw)
        assert item.tokens.tolist() == tokens[:k].tolist() and item.behaviour_logp.tolist() == lp[:k].tolist()
    stats = rule.after_rewards(outcome([(5, ids("A:1"), torch.zeros(4), False)] * 1, step=3)).stats
    assert stats["replayed"] == 2.0 and stats["staleness_mean"] == 2.0
    assert stats["prefix_fraction_mean"] == pytest.approx(sum(f.tokens.shape[0] / t.shape[0]
                                                              for f, t in zip(forced, picks, strict=True)) / 2)  # fmt: skip
    with pytest.raises(ValueError, match=r"max_fraction = 0\.1"):
        SAMPLE_SOURCES.get("mixed_prefix")(min_fraction=0.5, max_fraction=0.1)


def test_mixed_samples_train_with_historical_prefixes(tmp_path, monkeypatch):
    updates, forced = [], {}
    real_update, real_forced = recipe.run_update, SampleSourceStage.forced_samples

    def spy_update(policy, rollout, batch, *args, **kwargs):
        updates.append((rollout, batch))
        return real_update(policy, rollout, batch, *args, **kwargs)

    def spy_forced(stage, outcome):
        forced[outcome.step] = real_forced(stage, outcome)
        return forced[outcome.step]

    monkeypatch.setattr(recipe, "run_update", spy_update)
    monkeypatch.setattr(SampleSourceStage, "forced_samples", spy_forced)
    config = from_dict(TrainConfig, {
        "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_prompt_tokens": 16, "max_new_tokens": 5},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 2, "seed": 0, "digits": 2}}},
        "rewards": [{"fn": "exact_match", "name": "accuracy"}],
        "algorithm": {"group_size": 4, "prompts_per_step": 2, "micro_batch_size": 16, "minibatches": 2,
                      "clip": "off_policy", "sample_sources": [{"name": "mixed_prefix", "mixed": 2}]},
        "eval": {"at_start": False, "every": 0},
        "run": {"output_dir": str(tmp_path / "run"), "max_steps": 2, "progress_bar": False, "num_threads": 1},
    })  # fmt: skip
    recipe.train(config)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["num_samples"] for r in records] == [8, 8 + 4]  # step 2 revisits both prompts: 2 mixed samples each
    assert records[1]["sampling/mixed_prefix/replayed"] == 4.0 and records[1]["sampling/forced_mixed"] == 4.0
    rollout, batch = updates[1]
    for i, item in enumerate(forced[2]):
        row = len(rollout) - len(forced[2]) + i
        k = item.tokens.shape[0]
        assert rollout.structure["action_ids"][row, :k].tolist() == item.tokens.tolist()
        assert batch["behaviour_logp"][row, :k].tolist() == item.behaviour_logp.tolist()  # the historical policy's
        assert int(rollout.action_mask[row].sum()) > k  # continued by the current policy


def test_a_killed_run_with_mixed_prefixes_and_serial_exits_resumes_exactly(tmp_path, monkeypatch):
    """The buffer of historical completions and the continuations' random draws (the policy's generator) are
    restored: the resumed steps log what the uninterrupted run logged."""

    def config(out) -> TrainConfig:
        return from_dict(TrainConfig, {
            "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_prompt_tokens": 16,
                       "max_new_tokens": 5},
            "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 4, "seed": 0, "digits": 2}}},
            "rewards": [{"fn": "exact_match", "name": "accuracy"}],
            "algorithm": {"group_size": 3, "prompts_per_step": 2, "micro_batch_size": 16, "minibatches": 2,
                          "clip": "off_policy", "reward_shaping": ["exit_decay"],
                          "sample_sources": [{"name": "mixed_prefix", "mixed": 1},
                                             {"name": "serial_exits", "tokenizer": "builtin:arith-lm", "at": "tokens",
                                              "answer_marker": None, "cue": "="}]},
            "eval": {"at_start": False, "every": 0},
            "run": {"output_dir": str(out), "seed": 0, "max_steps": 4, "save_every": 2, "progress_bar": False,
                    "num_threads": 1},
        })  # fmt: skip

    recipe.train(config(tmp_path / "straight"))
    expected = records(tmp_path / "straight")
    steps = [json.loads(r) for r in expected]
    assert sum(s.get("sampling/forced_mixed", 0.0) for s in steps[2:]) > 0, "no mixed sample after the checkpoint"
    assert sum(s.get("sampling/forced_exit", 0.0) for s in steps[2:]) > 0, "no exit after the checkpoint"
    crashed = tmp_path / "crashed"
    train_killed_in_step(monkeypatch, config(crashed), step=3)
    resumed = config(crashed)
    recipe.train(dataclasses.replace(resumed, run=dataclasses.replace(resumed.run, resume="latest")))
    assert records(crashed) == expected
