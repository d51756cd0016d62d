"""NaN in the gradients or in the optimizer state: the update is skipped and counted, no checkpoint holds non-finite
weights, and the run stops after run.max_consecutive_skips steps with a message naming the step."""

from __future__ import annotations

import pytest
import torch

import genalign.trainer.recipe as recipe
from genalign.trainer import train
from genalign.trainer.guards import NonFiniteTrainingError, all_finite
from tests.reliability.conftest import metrics, toy_config


def test_nan_gradients_skip_the_update_and_stop_the_run_after_the_configured_skips(tmp_path):
    config = toy_config(tmp_path, policy={"nan_scores_from_step": 3}, run={"max_steps": 10, "max_consecutive_skips": 2})
    with pytest.raises(NonFiniteTrainingError, match=r"step 4: the last 2 steps skipped every update because the loss"):
        train(config)
    records = metrics(tmp_path / "run")
    assert [r["guard/skipped_optimizer_steps"] for r in records] == [0, 0, 1, 1]
    checkpoints = sorted((tmp_path / "run" / "checkpoints").iterdir())
    assert [p.name for p in checkpoints] == ["step-2"]  # step 4's save never happened


def test_nan_in_the_optimizer_state_is_detected_and_never_saved(tmp_path, monkeypatch):
    build = recipe.build_optimizer

    def poisoned(*args, **kwargs):
        optimizer, scheduler = build(*args, **kwargs)

        def poison(opt, args, kwargs):
            if len(poison.calls) == 2:  # after the third step: NaN in AdamW's first moment
                for state in opt.state.values():
                    state["exp_avg"].fill_(float("nan"))
            poison.calls.append(1)

        poison.calls = []
        optimizer.register_step_post_hook(poison)
        return optimizer, scheduler

    monkeypatch.setattr(recipe, "build_optimizer", poisoned)
    with pytest.raises(NonFiniteTrainingError, match=r"step 6: .*optimizer state holds NaN"):
        train(toy_config(tmp_path, run={"max_steps": 8, "max_consecutive_skips": 3}))
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["step-2"]  # 4 and 6 were refused
    assert [r["guard/skipped_optimizer_steps"] for r in metrics(tmp_path / "run")] == [0, 0, 0, 1, 1, 1]


def test_all_finite_is_one_reduction_that_never_overflows():
    assert all_finite([torch.full((3,), 1e38), torch.zeros(2)])
    assert not all_finite([torch.tensor([1.0, float("nan")])])
    assert not all_finite([torch.ones(2), torch.tensor([float("-inf")])])


def test_collapse_warnings_fire_once_for_each_silent_failure():
    from genalign.trainer.guards import CollapseMonitor

    monitor = CollapseMonitor(patience=3, growth=10.0)
    weights = [torch.nn.Parameter(torch.ones(4))]
    assert monitor.check(1, {"entropy": 1.0, "reward/std": 0.5}, weights) == []
    with torch.no_grad():
        weights[0].mul_(100.0)  # 100x the initial norm
    messages = monitor.check(2, {"entropy": 12.0, "reward/std": 0.0}, weights)
    assert any("weight norm grew 100x" in m for m in messages) and any("collapsed to noise" in m for m in messages)
    assert monitor.check(3, {"entropy": 12.0, "reward/std": 0.0}, weights) == []  # each kind once
    assert any("last 3 steps was equal" in m for m in monitor.check(4, {"entropy": 0.001, "reward/std": 0.0}, weights))
