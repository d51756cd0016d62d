"""The two step log-probability forms of the flow scheduler (issue 17, fidelity): the Gaussian log-density (default)
and Flow-GRPO's published CPS form ``−(x' − mean)²`` averaged over elements with every constant dropped.

The published form is re-derived here from Flow-GRPO's code (yifan123/flow_grpo,
``flow_grpo/diffusers_patch/sd3_sde_with_logprob.py``, ``sde_type == 'cps'`` branch, commit 54809b5), written out
independently of genalign's dynamics functions.
"""

from __future__ import annotations

import math

import pytest
import torch

from genalign.policies.flow.config import FlowPolicyConfig
from genalign.schedulers import FlowSDEScheduler
from genalign.schedulers.sde_dynamics import gaussian_log_prob, squared_error_log_prob, step_log_prob

NOISE_LEVEL = 0.7


def _scheduler(form: str = "gaussian", **kwargs) -> FlowSDEScheduler:
    scheduler = FlowSDEScheduler(shift=3.0, dynamics="cps", noise_level=NOISE_LEVEL, log_prob_form=form, **kwargs)
    scheduler.set_timesteps(10)
    return scheduler


def _published_cps(scheduler: FlowSDEScheduler, velocity, sample, prev_sample, index: int):
    """Flow-GRPO's CPS step: ``(mean, std, log_prob)`` with ``log_prob = mean over elements of −(x' − mean)²``."""
    sigma, sigma_prev = scheduler.sigmas[index].item(), scheduler.sigmas[index + 1].item()
    std_dev_t = sigma_prev * math.sin(NOISE_LEVEL * math.pi / 2)
    pred_original_sample = sample - sigma * velocity
    noise_estimate = sample + velocity * (1 - sigma)
    mean = pred_original_sample * (1 - sigma_prev) + noise_estimate * math.sqrt(sigma_prev**2 - std_dev_t**2)
    log_prob = -((prev_sample - mean) ** 2)
    return mean, std_dev_t, log_prob.mean(dim=tuple(range(1, log_prob.ndim)))


@pytest.mark.parametrize("index", [0, 4, 8])
def test_squared_error_form_is_flow_grpo_published_cps_log_prob(index):
    generator = torch.Generator().manual_seed(index)
    scheduler = _scheduler("squared_error")
    sample, velocity = torch.randn(3, 4, 8, 8, generator=generator), torch.randn(3, 4, 8, 8, generator=generator)
    out = scheduler.step(velocity, None, sample, step_index=index, generator=generator)
    mean, std, expected = _published_cps(scheduler, velocity, sample, out.prev_sample, index)
    torch.testing.assert_close(out.mean, mean, rtol=0, atol=1e-6)
    assert out.std.flatten().tolist() == pytest.approx([std] * 3, rel=1e-6)
    # measured over 45 random steps: max relative difference 1.8e-7 (float32 rounding of the mean: the published code
    # multiplies by a Python-float std, genalign by a float32 tensor); a wrong factor or constant would be O(1)
    torch.testing.assert_close(out.log_prob, expected, rtol=1e-6, atol=0)


def test_the_two_forms_differ_by_the_factor_one_over_two_sigma_squared_and_the_constants():
    generator = torch.Generator().manual_seed(5)
    gaussian, published = _scheduler("gaussian"), _scheduler("squared_error")
    sample, velocity = torch.randn(4, 16, generator=generator), torch.randn(4, 16, generator=generator)
    for index in range(9):  # the last CPS step (sigma' = 0) is deterministic and scores 0 in both forms
        stored = gaussian.step(velocity, None, sample, step_index=index, generator=generator).prev_sample
        a = gaussian.step(velocity, None, sample, step_index=index, prev_sample=stored)
        b = published.step(velocity, None, sample, step_index=index, prev_sample=stored)
        std = a.std.flatten()  # [B], one std per sample
        # Gaussian log-density per element: −(x' − μ)² / (2σ²) − log σ − ½ log 2π; the mean over elements keeps it
        expected = b.log_prob / (2 * std**2) - torch.log(std) - 0.5 * math.log(2 * math.pi)
        torch.testing.assert_close(a.log_prob, expected, rtol=1e-5, atol=1e-5)


def test_log_ratios_scale_by_two_sigma_squared_so_a_clip_range_means_something_else():
    generator = torch.Generator().manual_seed(6)
    gaussian, published = _scheduler("gaussian"), _scheduler("squared_error")
    sample = torch.randn(2, 32, generator=generator)
    v_old, v_new = torch.randn(2, 32, generator=generator), torch.randn(2, 32, generator=generator)
    for index in (0, 5, 8):
        stored = gaussian.step(v_old, None, sample, step_index=index, generator=generator).prev_sample
        log_ratio = {}
        for name, scheduler in (("gaussian", gaussian), ("published", published)):
            new = scheduler.step(v_new, None, sample, step_index=index, prev_sample=stored).log_prob
            old = scheduler.step(v_old, None, sample, step_index=index, prev_sample=stored).log_prob
            log_ratio[name] = new - old  # [B]
        std = gaussian.step(v_old, None, sample, step_index=index, prev_sample=stored).std.flatten()
        torch.testing.assert_close(log_ratio["published"], 2 * std**2 * log_ratio["gaussian"], rtol=1e-4, atol=1e-6)


def test_the_default_stays_the_gaussian_density_bit_for_bit():
    assert FlowSDEScheduler().config.log_prob_form == "gaussian"
    assert FlowPolicyConfig().log_prob_form == "gaussian"
    generator = torch.Generator().manual_seed(7)
    sample, mean = torch.randn(3, 5, generator=generator), torch.randn(3, 5, generator=generator)
    std = torch.tensor([0.3, 0.0, 1.2]).reshape(3, 1)
    assert torch.equal(step_log_prob(sample, mean, std), gaussian_log_prob(sample, mean, std))
    published = squared_error_log_prob(sample, mean, std, reduction="sum")
    assert published[1] == 0  # a deterministic transition scores 0, as in the Gaussian form
    assert torch.equal(published[0], -((sample[0] - mean[0]) ** 2).sum())
    with pytest.raises(ValueError, match="log_prob_form='gauss' is not supported"):
        FlowSDEScheduler(log_prob_form="gauss")
