"""The sample-source stage: planning from the stream, decisions over all processes, state through a checkpoint."""

from __future__ import annotations

import pytest
import torch

from genalign.registry import Option
from genalign.sampling import Decision, Forced, LocalSamples, SampleSourceStage, build_rules
from genalign.sampling.prompt_stream import PromptStream
from genalign.trainer.state_io import load_state, save_state

ROWS = [{"prompt": f"p{i}", "pid": i} for i in range(4)]


def test_without_rules_the_stage_takes_the_next_prompts_and_decides_nothing():
    stage, stream, reference = (
        SampleSourceStage([], seed=0, group_size=4),
        PromptStream(ROWS, seed=3),
        PromptStream(ROWS, seed=3),
    )
    plan = stage.plan(stream, 3, step=1)
    assert [(c.position, c.row) for c in plan.prompts] == reference.take(3)
    assert plan.samples_per_prompt == 4
    choice = stage.after_rewards(LocalSamples(torch.tensor([0, 0]), torch.tensor([1.0, 0.0]), torch.ones(2)),
                                 step=1, progress=0.1)  # fmt: skip
    assert choice.keep is None and choice.train is None and choice.stats == {}


def test_filtered_prompts_are_replaced_from_the_stream_up_to_the_draw_limit():
    stream = PromptStream(ROWS, seed=0)
    stage = SampleSourceStage(build_rules([Option("depo", {"max_draw": 2.0})]), seed=0, group_size=2)
    depo = stage.rules[0][1]
    easy = stream.row_index(0)
    depo.estimates = {easy: 1.0}  # the first prompt of the stream is known to be solved
    plan = stage.plan(stream, 2, step=1)
    assert [c.position for c in plan.prompts] == [1, 2]  # position 0 skipped, one more drawn
    assert stage._plan_stats == {"sampling/prompts_drawn": 3.0, "sampling/prompts_passed_over": 1.0,
                                 "sampling/prompts_refilled": 0.0}  # fmt: skip
    depo.estimates = {stream.row_index(p): 1.0 for p in range(3, 7)}  # everything the limit lets it draw is solved
    plan = stage.plan(stream, 2, step=2)
    assert [c.position for c in plan.prompts] == [3, 4]  # refilled from the passed-over ones, in draw order
    assert stage._plan_stats["sampling/prompts_refilled"] == 2.0 and stream.cursor == 7


class TwoProcesses:
    """``gather`` of process 1 when process 0 holds ``other`` (``[n0, 5]`` outcome rows)."""

    def __init__(self, other: torch.Tensor) -> None:
        self.other = other

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.ndim == 1:  # the sizes
            return torch.cat([torch.tensor([self.other.shape[0]]), tensor])
        return torch.cat([self.other.to(tensor.dtype), tensor])


def test_rules_see_every_process_and_each_process_gets_its_share():
    stream = PromptStream(ROWS, seed=0)
    rules = build_rules([Option("depo"), Option("gfpo", {"samples": 3}), Option("overlong_filter")])
    other = torch.tensor([[0, 1.0, 5, 0, 0], [0, 1.0, 2, 0, 0], [0, 1.0, 9, 1, 0]], dtype=torch.float64)  # process 0
    stage = SampleSourceStage(rules, seed=0, group_size=2, rank=1, gather=TwoProcesses(other))
    assert stage.plan(stream, 2, step=1).samples_per_prompt == 3
    # this process: prompt 1, lengths 4, 1, 3; the shortest (length 1) is truncated
    samples = LocalSamples(torch.tensor([1, 1, 1]), torch.tensor([0.0, 1.0, 0.0]), torch.tensor([4.0, 1.0, 3.0]),
                           torch.tensor([False, True, False]))  # fmt: skip
    choice = stage.after_rewards(samples, step=1, progress=0.5)
    assert choice.keep.tolist() == [1, 2]  # the two shortest of this process's group
    assert choice.train.tolist() == [False, True]  # of those, the truncated one is out of the loss
    depo = stage.rules[0][1]
    assert depo.estimates == {stream.row_index(0): 1.0, stream.row_index(1): pytest.approx(1 / 3)}  # both processes
    assert choice.stats["sampling/frac_kept"] == pytest.approx(4 / 6)
    assert choice.stats["sampling/frac_trained"] == pytest.approx(3 / 6)
    assert choice.stats["sampling/overlong_filter/frac_truncated"] == pytest.approx(2 / 6)


def test_two_rules_setting_the_samples_per_prompt_are_rejected():
    class Asks:
        def samples_per_prompt(self, group_size):
            return 2 * group_size

    with pytest.raises(ValueError, match="more than one sample source"):
        SampleSourceStage([("a", Asks()), ("b", Asks())], seed=0, group_size=2)


def test_state_survives_a_checkpoint_file_exactly(tmp_path):
    stage = SampleSourceStage(build_rules([Option("depo", {"momentum": 0.3}), Option("spo")]), seed=0, group_size=2)
    stream = PromptStream(ROWS, seed=0)
    plan = stage.plan(stream, 4, step=1)
    positions = torch.tensor([c.position for c in plan.prompts]).repeat_interleave(2)
    rewards = torch.tensor([0.1, 0.7, 1 / 3, 0.0, 1.0, 0.9, 0.2, 2 / 7])
    stage.after_rewards(LocalSamples(positions, rewards, torch.ones(8)), step=1, progress=0.5)
    save_state({"extra": {"sample_sources": stage.state_dict()}}, tmp_path / "trainer_state")
    restored = SampleSourceStage(build_rules([Option("depo", {"momentum": 0.3}), Option("spo")]), seed=0, group_size=2)
    restored.load_state_dict(load_state(tmp_path / "trainer_state")["extra"]["sample_sources"])
    assert restored.state_dict() == stage.state_dict()
    assert stage.state_dict()["spo"]["alpha"]  # something was tracked
    a, b = PromptStream(ROWS, seed=0), PromptStream(ROWS, seed=0)
    a.cursor = b.cursor = stream.cursor
    assert [c.position for c in stage.plan(a, 2, step=2).prompts] == [
        c.position for c in restored.plan(b, 2, step=2).prompts
    ]


class AsksForMore:
    """Asks for ``extra`` samples of every prompt whose samples so far are all failures, for ``rounds`` rounds."""

    rounds, needs_tokens, forces, needs_guidance, pool, max_draw = 3, True, True, frozenset(), 1.0, 1.0

    def __init__(self, extra: int) -> None:
        self.extra, self.seen = extra, []

    def choose(self, pool, wanted, generator):
        return pool

    def samples_per_prompt(self, group_size):
        return None

    def more_samples(self, outcome):
        self.seen.append(outcome.round)
        failed = {}
        for position in outcome.positions.unique().tolist():
            if float(outcome.rewards[outcome.positions == position].max()) <= 0:
                failed[position] = self.extra
        return failed

    def round_guidance(self, outcome):
        return {}

    def forced_samples(self, outcome):
        first = int(outcome.positions[0])
        tokens, logp = outcome.completion(0)
        return [Forced(first, tokens, logp, kind="replay")]

    def after_rewards(self, outcome):
        return Decision(stats={"forced": float(outcome.forced.sum())})

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        return None


def test_extra_rounds_take_the_largest_request_and_stop_at_the_rules_round_limit():
    stream = PromptStream(ROWS, seed=0)
    two, three = AsksForMore(2), AsksForMore(3)
    two.rounds = 2
    stage = SampleSourceStage([("two", two), ("three", three)], seed=0, group_size=2)
    plan = stage.plan(stream, 2, step=1)
    a, b = (c.position for c in plan.prompts)
    samples = LocalSamples(torch.tensor([a, a, b, b]), torch.tensor([0.0, 0.0, 1.0, 0.0]), torch.tensor([2.0, 1, 1, 1]),
                           tokens=torch.tensor([[5, 6], [7, 0], [8, 0], [9, 0]]),
                           behaviour_logp=torch.tensor([[-0.5, -0.25], [-1.0, 0], [-2.0, 0], [-3.0, 0]]))  # fmt: skip
    outcome = stage.observe(samples, step=1, progress=0.5, round=0)
    assert outcome.tokens.tolist() == [[5, 6], [7, 0], [8, 0], [9, 0]]
    assert stage.more_samples(outcome) == {a: 3}  # the larger request for the failed prompt
    outcome.round = 1  # rule "two" allows rounds 0 and 1 only: asked after round 0, silent after round 1
    assert stage.more_samples(outcome) == {a: 3} and two.seen == [0]
    outcome.round = 2
    assert stage.more_samples(outcome) == {}  # round 2 is the last of rule "three"
    forced = stage.forced_samples(outcome)
    assert [(f.position, f.tokens.tolist(), f.behaviour_logp.tolist()) for f in forced] == [
        (a, [5, 6], [-0.5, -0.25]),
        (a, [5, 6], [-0.5, -0.25]),
    ]
    forced_flags = LocalSamples(
        samples.group_ids, samples.rewards, samples.lengths, forced=torch.tensor([0, 0, 0, 1]).bool()
    )
    choice = stage.decide(stage.observe(forced_flags, step=1, progress=0.5, round=2))
    assert choice.stats["sampling/three/forced"] == 1.0
    assert choice.stats["sampling/extra_samples"] == 6.0 and choice.stats["sampling/forced_replay"] == 2.0


def test_a_request_for_a_prompt_outside_the_step_is_an_error_naming_the_rule():
    rule = AsksForMore(1)
    stage = SampleSourceStage([("asks", rule)], seed=0, group_size=2)
    stage.plan(PromptStream(ROWS, seed=0), 1, step=1)
    outcome = stage.observe(LocalSamples(torch.tensor([0]), torch.tensor([0.0]), torch.ones(1)), step=1, progress=0.1,
                            round=0)  # fmt: skip
    outcome.positions = torch.tensor([99])
    with pytest.raises(ValueError, match="'asks' asked for samples of prompt 99"):
        stage.more_samples(outcome)
