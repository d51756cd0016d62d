"""Trainer components: prompt stream, LR schedule, JSON-lines log, minibatch split, reward counters."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.config.schema import OptimConfig
from genalign.sampling.prompt_stream import PromptStream
from genalign.trainer.metrics import JsonlLog
from genalign.trainer.optim import build_optimizer, lr_multiplier, named_trainable_parameters
from genalign.trainer.update import split_minibatches


def test_prompt_stream_visits_every_row_once_per_epoch_and_resumes_from_its_cursor():
    rows = [{"prompt": str(i)} for i in range(5)]
    stream = PromptStream(rows, seed=3)
    first_epoch = [r["prompt"] for _, r in stream.take(5)]
    assert sorted(first_epoch) == [str(i) for i in range(5)]
    rest = stream.take(7)
    assert [pos for pos, _ in rest] == list(range(5, 12))
    resumed = PromptStream(rows, seed=3, cursor=5)
    assert [r for _, r in resumed.take(7)] == [r for _, r in rest]
    with pytest.raises(ValueError, match="no rows"):
        PromptStream([], seed=0)


@pytest.mark.parametrize(
    ("step", "schedule", "expected"),
    [(0, "constant", 0.5), (1, "constant", 1.0), (5, "constant", 1.0), (2, "linear", 1.0), (7, "linear", 0.375),
     (10, "linear", 0.0), (6, "cosine", 0.5 * (1 + math.cos(math.pi * 0.5)))],
)  # fmt: skip
def test_lr_multiplier_hand_values(step, schedule, expected):
    assert lr_multiplier(step, warmup_steps=2, total_steps=10, schedule=schedule) == pytest.approx(expected)


class _TwoTowers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.visual = torch.nn.Linear(2, 2)
        self.text = torch.nn.Linear(2, 2)
        self.frozen = torch.nn.Linear(2, 2).requires_grad_(False)

    def trainable_parameters(self):
        return [p for p in self.parameters() if p.requires_grad]

    def modules_to_train(self):
        return [self]


def test_lr_scale_builds_one_group_per_pattern_and_the_schedule_scales_each():
    policy = _TwoTowers()
    named = named_trainable_parameters(policy)
    assert [name for name, _ in named] == ["visual.weight", "visual.bias", "text.weight", "text.bias"]
    cfg = OptimConfig(lr=0.1, warmup_steps=2, lr_scale={"visual.*": 0.1})
    optimizer, scheduler = build_optimizer(named, cfg, total_steps=10)
    groups = {g["name"]: g for g in optimizer.param_groups}
    assert groups["visual.*"]["params"] == [policy.visual.weight, policy.visual.bias]
    assert groups["default"]["params"] == [policy.text.weight, policy.text.bias]
    assert groups["visual.*"]["lr"] == pytest.approx(0.1 * 0.1 * 0.5)  # warm-up step 0: factor 0.5
    assert groups["default"]["lr"] == pytest.approx(0.1 * 0.5)
    optimizer.step()
    scheduler.step()
    assert groups["visual.*"]["lr"] == pytest.approx(0.01) and groups["default"]["lr"] == pytest.approx(0.1)


def test_lr_scale_rejects_a_pattern_that_matches_nothing_and_bad_factors():
    named = named_trainable_parameters(_TwoTowers())
    with pytest.raises(
        ValueError, match=r"\['vision\.\*'\] match no trainable parameter; names look like: visual.weight"
    ):
        build_optimizer(named, OptimConfig(lr=0.1, lr_scale={"vision.*": 0.1}), total_steps=10)
    with pytest.raises(ValueError, match=r"optim.lr_scale\['visual.\*'\] = 0 must be a number > 0"):
        OptimConfig(lr=0.1, lr_scale={"visual.*": 0}).validate()


def test_split_minibatches_covers_the_batch_in_order():
    blocks = split_minibatches(10, 3)
    assert [i for b in blocks for i in b] == list(range(10)) and len(blocks) == 3


def test_jsonl_log_truncates_records_after_a_step(tmp_path):
    log = JsonlLog(tmp_path / "m.jsonl")
    for step in range(1, 6):
        log.append({"step": step, "x": torch.tensor(step * 1.0), "nan": float("nan")})
    log.truncate_after(3)
    assert [r["step"] for r in log.read()] == [1, 2, 3] and log.read()[0]["nan"] is None


def test_reward_set_collects_counters_of_reward_objects_since_the_last_take():
    from genalign.config.schema import RewardSpec
    from genalign.rewards import REWARDS, register_reward
    from genalign.trainer.rewards import RewardSet

    if "counting_probe" not in REWARDS:

        @register_reward("counting_probe")
        class CountingProbe:
            def __init__(self):
                self.calls = 0

            def __call__(self, prompts, completions, **columns):
                self.calls += 1
                return [float(c == "a") for c in completions]

            def pop_metrics(self):
                calls, self.calls = self.calls, 0
                return {"calls": float(calls)}

    rewards = RewardSet([RewardSpec(fn="counting_probe", name="probe")])
    rows = [{"prompt": "p"}, {"prompt": "q"}]
    table, errors = rewards(rows, ["a", "b"])
    rewards(rows, ["b", "b"])
    assert table.tolist() == [[1.0], [0.0]] and errors.tolist() == [0.0]
    assert rewards.take_metrics() == {"reward/probe/calls": 2.0} and rewards.take_metrics() == {
        "reward/probe/calls": 0.0
    }
    assert rewards.weighted_sum(rows, ["a", "a"]).tolist() == [1.0, 1.0]
