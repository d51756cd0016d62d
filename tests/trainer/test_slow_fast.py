"""[222] SFPO update schedule: parameters after one update against hand-computed values on a one-parameter linear
policy, the α = 1 / α = 0 limits, Adam's moments at the reposition, and config validation."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from genalign.algorithms import StepBatch
from genalign.algorithms.update_schedules import UPDATE_SCHEDULES
from genalign.config import ConfigError
from genalign.config.schema import AlgorithmConfig
from genalign.experimental.schedules.slow_fast import SlowFastSchedule
from genalign.policies.base import Policy, PolicyCapabilities, Rollout, ScoreOutput, ScoreRequest
from genalign.trainer.update import run_update

X = [1.0, 2.0]  # one action per sample: logπ_w(a_n) = w·x_n (a linear "policy", enough to test the schedule)
ADV = [1.0, -1.0]
LR = 0.1


class LinearPolicy(Policy):
    """``logp [n, 1] = w · x`` with one parameter ``w``; the rollout is fixed by the test."""

    family = "linear"
    capabilities = PolicyCapabilities()

    def __init__(self, w0: float) -> None:
        self.w = nn.Parameter(torch.tensor([w0]))

    def rollout(self, rows, group_size, *, mode="train", request=None):
        raise NotImplementedError("the test builds the rollout")

    def score(self, rollout: Rollout, request: ScoreRequest = ScoreRequest()) -> ScoreOutput:
        return ScoreOutput(logp=rollout.per_sample["x"][:, None] * self.w)  # [n, 1]

    def trainable_parameters(self):
        return [self.w]

    def modules_to_train(self):
        return []

    def save(self, directory):
        raise NotImplementedError

    def load(self, directory):
        raise NotImplementedError


def batch(w0: float) -> tuple[Rollout, StepBatch]:
    x = torch.tensor(X)
    old = (x * w0)[:, None]  # [2, 1] log-probs of the weights that start the update
    rollout = Rollout(
        rows=[{}, {}], outputs=["", ""], group_ids=torch.tensor([0, 0]), old_logp=old,
        action_mask=torch.ones(2, 1), per_sample={"x": x},
    )  # fmt: skip
    return rollout, StepBatch(mask=rollout.action_mask, group_ids=rollout.group_ids, advantages=torch.tensor(ADV),
                              old_logp=old)  # fmt: skip


def update(w0: float, *, optimizer: str = "sgd", **algorithm) -> tuple[float, dict]:
    cfg = AlgorithmConfig(clip="none", aggregation="token_mean", group_size=2, prompts_per_step=1, **algorithm)
    cfg.validate()
    policy = LinearPolicy(w0)
    params = policy.trainable_parameters()
    opt = torch.optim.SGD(params, lr=LR) if optimizer == "sgd" else torch.optim.Adam(params, lr=LR)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    rollout, inputs = batch(w0)
    metrics = run_update(policy, rollout, inputs, cfg.loss_plan(), cfg, opt, sched, params, None)
    return float(policy.w.detach()), metrics


def grad(w: float, w0: float) -> float:
    """dL/dw of L(w) = −mean_n A_n·exp(x_n·w − x_n·w0) (clip 'none', token mean over one action per sample)."""
    return -sum(a * math.exp(x * (w - w0)) * x for a, x in zip(ADV, X, strict=True)) / len(X)


def test_sfpo_with_sgd_matches_the_hand_computed_update():
    w0, alpha = 0.0, 0.5
    # fast trajectory, K = 2: g(0) = −(1·1 − 1·2)/2 = 0.5 -> w1 = −0.05; w2 = w1 − 0.1·g(w1)
    w1 = w0 - LR * grad(w0, w0)
    assert w1 == pytest.approx(-0.05)
    w2 = w1 - LR * grad(w1, w0)
    repositioned = w0 + alpha * (w2 - w0)
    expected = repositioned - LR * grad(repositioned, w0)  # slow correction from θ̃
    got, metrics = update(w0, update_schedule={"name": "sfpo", "fast_steps": 2, "alpha": alpha})
    assert got == pytest.approx(expected, rel=1e-6)
    assert metrics["sfpo/fast_displacement"] == pytest.approx(abs(w2 - w0), rel=1e-6)
    assert metrics["guard/optimizer_steps"] == 3  # K fast + 1 slow


def test_alpha_one_is_plain_passes_and_alpha_zero_is_one_step():
    w0 = 0.3
    full, _ = update(w0, update_schedule={"name": "sfpo", "fast_steps": 2, "alpha": 1.0})
    plain, _ = update(w0, inner_epochs=3)
    assert full == pytest.approx(plain, rel=1e-6)
    none, _ = update(w0, update_schedule={"name": "sfpo", "fast_steps": 2, "alpha": 0.0})
    one, _ = update(w0)
    assert none == pytest.approx(one, rel=1e-6) and none == pytest.approx(w0 - LR * grad(w0, w0), rel=1e-6)


def test_adam_moments_restored_at_the_reposition_make_the_slow_step_a_first_adam_step():
    w0, alpha = 0.0, 0.5
    args = {"name": "sfpo", "fast_steps": 2, "alpha": alpha, "optimizer_state": "restore"}
    got, _ = update(w0, optimizer="adam", update_schedule=args)
    # Adam from a fresh state: step 1 moves by lr·g/(|g| + eps) (bias corrections cancel), step 2 by
    # lr·m̂/(√v̂ + eps) with m̂ = (0.9·0.1·g1 + 0.1·g2)/(1 − 0.81), v̂ = (0.999·0.001·g1² + 0.001·g2²)/(1 − 0.999²)
    g1 = grad(w0, w0)
    w1 = w0 - LR * g1 / (abs(g1) + 1e-8)
    g2 = grad(w1, w0)
    m = (0.9 * 0.1 * g1 + 0.1 * g2) / (1 - 0.9**2)
    v = (0.999 * 0.001 * g1**2 + 0.001 * g2**2) / (1 - 0.999**2)
    w2 = w1 - LR * m / (math.sqrt(v) + 1e-8)
    repositioned = w0 + alpha * (w2 - w0)
    g3 = grad(repositioned, w0)
    assert got == pytest.approx(repositioned - LR * g3 / (abs(g3) + 1e-8), rel=1e-5)
    kept, _ = update(w0, optimizer="adam", update_schedule={**args, "optimizer_state": "keep"})
    assert kept != pytest.approx(got, rel=1e-4)  # the third Adam step uses the fast trajectory's moments


def test_schedule_registry_and_config_errors():
    assert {"standard", "sfpo"} <= set(UPDATE_SCHEDULES.names())
    assert UPDATE_SCHEDULES.meta("sfpo")["source"] == "[222] SFPO"
    assert AlgorithmConfig(update_schedule={"name": "sfpo", "fast_steps": 4}).optimizer_steps_per_update() == 5
    assert not AlgorithmConfig(update_schedule="sfpo").fully_on_policy  # the old log-probs are rescored first
    bad = [
        ({"update_schedule": "sfpo", "inner_epochs": 2}, "inner_epochs = 2"),
        ({"update_schedule": {"name": "sfpo", "alpha": 1.5}}, r"algorithm.update_schedule.alpha = 1.5"),
        ({"update_schedule": {"name": "sfpo", "fast_steps": 0}}, "fast_steps = 0"),
        ({"update_schedule": {"name": "sfpo", "optimizer_state": "zero"}}, "optimizer_state"),
        ({"update_schedule": {"name": "sfpo", "beta": 1}}, "beta"),
        ({"update_schedule": "slow_fast"}, "Valid names: sfpo, standard"),
    ]
    for fields, message in bad:
        with pytest.raises(ConfigError, match=message):
            AlgorithmConfig(**fields).validate()


def test_schedule_keeps_no_state_between_updates():
    param = nn.Parameter(torch.tensor([1.0]))
    opt = torch.optim.SGD([param], lr=1.0)
    schedule = SlowFastSchedule([param], opt, inner_epochs=1, fast_steps=1, alpha=0.25)
    with torch.no_grad():
        param.add_(4.0)  # the fast trajectory moved θ from 1 to 5
    schedule.after_pass(0)
    assert float(param.detach()) == pytest.approx(1.0 + 0.25 * 4.0)
    schedule.after_pass(1)  # the slow pass is not repositioned again
    assert float(param.detach()) == pytest.approx(2.0) and schedule.passes == 2
