"""The FlowSDEScheduler contract, run once per registered dynamics (formulas.md §5, §8)."""

import math

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler

from genalign.schedulers import SDE_DYNAMICS, FlowSDEScheduler

STOCHASTIC = [name for name in SDE_DYNAMICS.names() if name != "ode"]


def _scheduler(dynamics: str = "flow_sde", steps: int = 6, **kwargs) -> FlowSDEScheduler:
    scheduler = FlowSDEScheduler(shift=3.0, dynamics=dynamics, **kwargs)
    scheduler.set_timesteps(steps)
    return scheduler


def test_sigma_schedule_is_the_flow_match_euler_schedule():
    reference = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True)
    ours = FlowSDEScheduler(shift=3.0, use_dynamic_shifting=True)
    reference.set_timesteps(8, sigmas=[1 - k / 8 for k in range(8)], mu=0.8)
    ours.set_timesteps(8, sigmas=[1 - k / 8 for k in range(8)], mu=0.8)
    torch.testing.assert_close(ours.sigmas, reference.sigmas.float())
    torch.testing.assert_close(ours.timesteps, reference.timesteps)
    assert FlowSDEScheduler.from_config(reference.config).config.shift == 3.0


@pytest.mark.parametrize("dynamics", SDE_DYNAMICS.names())
def test_noise_level_zero_equals_diffusers_euler_step(dynamics):
    torch.manual_seed(0)
    ours, euler = _scheduler(dynamics), FlowMatchEulerDiscreteScheduler(shift=3.0)
    euler.set_timesteps(6)
    sample = torch.randn(2, 4, 3, 3)
    for t in ours.timesteps:
        velocity = torch.randn_like(sample)
        out = ours.step(velocity, t, sample, noise_level=0.0)
        expected = euler.step(velocity, t, sample).prev_sample
        torch.testing.assert_close(out.prev_sample, expected, rtol=0, atol=1e-6)
        assert torch.all(out.std == 0)
        sample = expected


@pytest.mark.parametrize("dynamics", STOCHASTIC)
def test_empirical_mean_and_std_match_the_returned_ones(dynamics):
    scheduler = _scheduler(dynamics, noise_level=0.6)
    generator = torch.Generator().manual_seed(0)
    sample = torch.randn(1, 8, generator=generator).expand(40_000, 8).contiguous()
    velocity = torch.randn(1, 8, generator=generator).expand(40_000, 8).contiguous()
    out = scheduler.step(velocity, None, sample, step_index=2, generator=generator)
    std = out.std[0, 0].item()
    assert std > 0
    torch.testing.assert_close(out.prev_sample.mean(0), out.mean[0], atol=4 * std / math.sqrt(40_000), rtol=0)
    torch.testing.assert_close(out.prev_sample.std(0), torch.full((8,), std), atol=0.02 * std, rtol=0)


@pytest.mark.parametrize("dynamics", STOCHASTIC)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_log_prob_is_the_gaussian_density(dynamics, reduction):
    scheduler = _scheduler(dynamics, log_prob_reduction=reduction)
    generator = torch.Generator().manual_seed(1)
    sample, velocity = torch.randn(3, 2, 4, 4, generator=generator), torch.randn(3, 2, 4, 4, generator=generator)
    out = scheduler.step(velocity, None, sample, step_index=1, generator=generator)
    density = torch.distributions.Normal(out.mean, out.std.expand_as(out.mean)).log_prob(out.prev_sample).flatten(1)
    expected = density.mean(1) if reduction == "mean" else density.sum(1)
    torch.testing.assert_close(out.log_prob, expected)
    assert out.log_prob.dtype == torch.float32


@pytest.mark.parametrize("dynamics", STOCHASTIC)
def test_scoring_a_stored_trajectory_reproduces_rollout_log_probs_exactly(dynamics):
    scheduler = _scheduler(dynamics)
    generator = torch.Generator().manual_seed(2)
    weight = torch.randn(4, 4, generator=generator)
    x = torch.randn(3, 4, generator=generator)
    states, rollout_logp = [x], []
    for i, t in enumerate(scheduler.timesteps[:-1]):  # cps is deterministic at the last step
        out = scheduler.step(x @ weight, t, x, step_index=i, generator=generator)
        x = out.prev_sample
        states.append(x)
        rollout_logp.append(out.log_prob)
    scored = [
        scheduler.step(states[i] @ weight, None, states[i], step_index=i, prev_sample=states[i + 1]).log_prob
        for i in range(len(states) - 1)
    ]
    ratio = torch.exp(torch.stack(scored) - torch.stack(rollout_logp))
    assert torch.equal(ratio, torch.ones_like(ratio))


def test_per_sample_step_indices_equal_one_step_at_a_time():
    scheduler = _scheduler("dance_sde", noise_level=0.3)
    torch.manual_seed(3)
    sample, velocity, target = torch.randn(3, 5), torch.randn(3, 5), torch.randn(3, 5)
    batched = scheduler.step(velocity, None, sample, step_index=torch.tensor([0, 2, 4]), prev_sample=target)
    for row, index in enumerate([0, 2, 4]):
        single = scheduler.step(
            velocity[row : row + 1], None, sample[row : row + 1], step_index=index, prev_sample=target[row : row + 1]
        )
        torch.testing.assert_close(batched.log_prob[row : row + 1], single.log_prob)
        torch.testing.assert_close(batched.mean[row : row + 1], single.mean)


def test_internal_counter_follows_the_diffusers_loop_and_errors_are_clear():
    scheduler = FlowSDEScheduler()
    with pytest.raises(ValueError, match="set_timesteps"):
        scheduler.step(torch.zeros(1, 2), 1000.0, torch.zeros(1, 2))
    scheduler.set_timesteps(3)
    for expected_index, t in enumerate(scheduler.timesteps):
        assert scheduler.step_index in (None, expected_index)
        scheduler.step(torch.zeros(1, 2), t, torch.zeros(1, 2), noise_level=0.0)
    assert scheduler.step_index == 3
    with pytest.raises(ValueError, match="prev_sample has shape"):
        scheduler.step(torch.zeros(1, 2), None, torch.zeros(1, 2), step_index=0, prev_sample=torch.zeros(1, 3))
    with pytest.raises(ValueError, match="noise_level=-1"):
        FlowSDEScheduler(noise_level=-1)
    with pytest.raises(ValueError, match="invert_sigmas=True"):
        FlowSDEScheduler(invert_sigmas=True)


def test_karras_sigmas_are_passed_to_the_schedule():
    reference = FlowMatchEulerDiscreteScheduler(use_karras_sigmas=True)
    ours = FlowSDEScheduler.from_config(reference.config)
    reference.set_timesteps(6)
    ours.set_timesteps(6)
    torch.testing.assert_close(ours.sigmas, reference.sigmas.float())
