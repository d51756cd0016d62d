"""Two generic channels of the sample-source stage: guidance for one extra round (``SampleRule.round_guidance``: the
row an extra sample is drawn with) and per-sample ``source`` signals of a rule's decision (``Decision.signals``: each
process gets its share, and a config reading one that no configured rule provides is refused)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.algorithms import StepBatch
from genalign.config import ConfigError, from_dict
from genalign.config.schema import TrainConfig
from genalign.policies.base import GUIDANCE_KEY
from genalign.sampling import Decision, LocalSamples, RuleDefaults, SampleSourceStage
from genalign.sampling.prompt_stream import PromptStream
from genalign.trainer.step_batch import gather_batch
from tests.sampling.test_stage import TwoProcesses

ROWS = [{"prompt": f"p{i}", "pid": i, GUIDANCE_KEY: {"hint": "!", "temperature": 0.5}} for i in range(4)]


class GuidesOneRound(RuleDefaults):
    """Asks for one more sample of every prompt after round 0, drawn with ``hint`` replaced."""

    rounds = 2

    def __init__(self, hint: str, only: int | None = None) -> None:
        self.hint, self.only = hint, only

    def more_samples(self, outcome):
        return {p: 1 for p in set(outcome.positions.tolist())} if outcome.round == 0 else {}

    def round_guidance(self, outcome):
        return {p: {"hint": self.hint + str(p)} for p in set(outcome.positions.tolist()) if p != self.only}


def test_round_guidance_replaces_the_planned_keys_for_that_round_only():
    first, second = GuidesOneRound("a"), GuidesOneRound("b", only=1)
    stage = SampleSourceStage([("first", first), ("second", second)], seed=0, group_size=2)
    plan = stage.plan(PromptStream(ROWS, seed=0), 2, step=1)
    a, b = (c.position for c in plan.prompts)
    outcome = stage.observe(LocalSamples(torch.tensor([a, b]), torch.zeros(2), torch.ones(2)), step=1, progress=0.5,
                            round=0)  # fmt: skip
    assert stage.more_samples(outcome) == {a: 1, b: 1}
    # the later rule's keys win; the planned temperature stays; the candidate's own row is untouched
    assert stage.sampling_row(a)[GUIDANCE_KEY] == {"hint": f"b{a}", "temperature": 0.5}
    assert stage.sampling_row(b)[GUIDANCE_KEY] == {"hint": "a1" if b == 1 else f"b{b}", "temperature": 0.5}
    assert stage.candidate(a).row[GUIDANCE_KEY] == {"hint": "!", "temperature": 0.5}
    outcome.round = 1  # no rule guides the next round: the planned rows again
    assert stage.more_samples(outcome) == {}
    assert stage.sampling_row(a) is stage.candidate(a).row


class Tags(RuleDefaults):
    """Flags the samples whose reward is positive (signal ``expert_guided``, a declared ``source`` signal)."""

    def after_rewards(self, outcome):
        return Decision(signals={"expert_guided": outcome.rewards > 0})


def test_each_process_gets_its_share_of_a_rules_signals():
    other = torch.tensor([[0, 1.0, 5, -1, 0], [0, 0.0, 2, -1, 0]], dtype=torch.float64)  # process 0's two samples
    stage = SampleSourceStage([("tags", Tags())], seed=0, group_size=2, rank=1, gather=TwoProcesses(other))
    stage.plan(PromptStream(ROWS, seed=0), 2, step=1)
    choice = stage.after_rewards(LocalSamples(torch.tensor([1, 1, 1]), torch.tensor([0.0, 2.0, 3.0]), torch.ones(3)),
                                 step=1, progress=0.5)  # fmt: skip
    assert choice.signals["expert_guided"].tolist() == [False, True, True]  # this process's three, not process 0's


def test_a_signal_given_twice_or_of_the_wrong_size_names_the_rule():
    class Short(RuleDefaults):
        def after_rewards(self, outcome):
            return Decision(signals={"expert_guided": torch.ones(1, dtype=torch.bool)})

    for rules, culprit in (([("a", Tags()), ("b", Tags())], "'b'"), ([("short", Short())], "'short'")):
        stage = SampleSourceStage(rules, seed=0, group_size=2)
        stage.plan(PromptStream(ROWS, seed=0), 1, step=1)
        with pytest.raises(ValueError, match=f"sample source {culprit} gave signal 'expert_guided'"):
            stage.after_rewards(LocalSamples(torch.tensor([0, 0]), torch.ones(2), torch.ones(2)), step=1, progress=0.1)


def test_a_shaper_reading_a_source_signal_needs_a_rule_that_provides_it():
    base = {
        "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_new_tokens": 4},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "digits": 1}}},
        "rewards": [{"fn": "exact_match"}],
    }
    with pytest.raises(ConfigError) as err:
        from_dict(TrainConfig, {**base, "algorithm": {"reward_shaping": ["exit_decay"]}})
    message = str(err.value)
    assert "algorithm.reward_shaping 'exit_decay' needs 'exit_order'" in message
    assert "add 'serial_exits' to algorithm.sample_sources" in message
    sources = [{"name": "serial_exits", "tokenizer": "builtin:arith-lm", "at": "tokens", "answer_marker": None}]
    config = from_dict(
        TrainConfig, {**base, "algorithm": {"reward_shaping": ["exit_decay"], "sample_sources": sources}}
    )
    assert config.algorithm.needs()["exit_order"] == ["algorithm.reward_shaping 'exit_decay'"]


def test_the_advantage_stage_gathers_a_scalar_signal_as_it_is():
    batch = StepBatch(mask=torch.ones(2, 3), progress=0.25, expert_guided=torch.tensor([True, False]))
    gathered = gather_batch(batch, frozenset({"progress", "expert_guided"}))
    assert gathered["progress"] == 0.25 and gathered["expert_guided"].tolist() == [True, False]
