"""SAGE-GRPO [76] manifold-aware SDE: hand-computed step, Euler limit, agreement with Flow-GRPO's first-order terms
and a Monte-Carlo check of mean, std and log-probability against a fine Euler-Maruyama simulation of the SDE."""

import itertools
import math

import pytest
import torch

from genalign.schedulers.sde_dynamics import SDE_DYNAMICS, gaussian_log_prob

STEP = SDE_DYNAMICS.get("manifold_sde")


def _step(sigma, sigma_next, a, sigma_max=0.9, x=1.0, v=2.0):
    mean, std = STEP(torch.full((1, 1), x), torch.full((1, 1), v), torch.tensor([sigma]), torch.tensor([sigma_next]),
                     noise_level=a, sigma_max=sigma_max)  # fmt: skip
    return mean.item(), std.item()


def test_hand_computed_step():
    # ln(0.75 / 0.5) = 0.405465; I_var = 0.405465 - 0.25; std = 0.5 sqrt(I_var)
    # mean = 1 - 0.25 * 2 - 0.5 * 0.25 * 0.405465 * (1 + 0.5 * 2)
    mean, std = _step(0.5, 0.25, 0.5)
    assert mean == pytest.approx(0.398634, abs=1e-5)
    assert std == pytest.approx(0.197145, abs=1e-5)


def test_first_step_uses_the_cap_and_matches_flow_sde_drift():
    # capped region: I_var = (1 - 0.64) / (2 * 0.2) = 0.9, std = 0.5 sqrt(0.9); drift integral = 0.2 / 0.2 = 1
    mean, std = _step(1.0, 0.8, 0.5, sigma_max=0.8)
    assert std == pytest.approx(0.5 * math.sqrt(0.9), abs=1e-6)
    flow_mean, flow_std = SDE_DYNAMICS.get("flow_sde")(torch.ones(1, 1), torch.full((1, 1), 2.0), torch.tensor([1.0]),
                                                       torch.tensor([0.8]), noise_level=0.5, sigma_max=0.8)  # fmt: skip
    assert mean == pytest.approx(0.475, abs=1e-6) and flow_mean.item() == pytest.approx(0.475, abs=1e-6)
    assert std < flow_std.item() == pytest.approx(0.5, abs=1e-6)  # exact integral injects less noise


def test_noise_level_zero_is_euler_and_small_steps_agree_with_flow_sde():
    mean, std = _step(0.5, 0.25, 0.0)
    assert mean == pytest.approx(1 - 0.25 * 2, abs=1e-7) and std == 0
    m, s = _step(0.5, 0.4999, 0.7)
    fm, fs = SDE_DYNAMICS.get("flow_sde")(torch.ones(1, 1), torch.full((1, 1), 2.0), torch.tensor([0.5]),
                                          torch.tensor([0.4999]), noise_level=0.7, sigma_max=0.9)  # fmt: skip
    assert m == pytest.approx(fm.item(), abs=1e-7) and s == pytest.approx(fs.item(), rel=1e-3)


def test_monte_carlo_simulation_matches_mean_std_and_log_prob():
    """Simulate dx = [v + g(s)^2 / (2 s) x1] ds + g(s) dW from sigma to sigma' with 400 Euler-Maruyama sub-steps
    (velocity and x1 held at the step start, as in the closed form), g(s)^2 = a^2 s / (1 - s)."""
    a, sigma, sigma_next, x0, v = 0.8, 0.7, 0.3, 0.4, -1.2
    x1 = x0 + (1 - sigma) * v
    generator = torch.Generator().manual_seed(0)
    paths, substeps = 40000, 400
    grid = torch.linspace(sigma, sigma_next, substeps + 1, dtype=torch.float64)
    x = torch.full((paths,), x0, dtype=torch.float64)
    for s, s_next in itertools.pairwise(grid):
        ds = s_next - s
        g2 = a**2 * s / (1 - s)
        x = x + v * ds + g2 / (2 * s) * ds * x1 + torch.sqrt(g2 * -ds) * torch.randn(paths, generator=generator,
                                                                                     dtype=torch.float64)  # fmt: skip
    mean, std = STEP(torch.full((1, 1), x0), torch.full((1, 1), v), torch.tensor([sigma]), torch.tensor([sigma_next]),
                     noise_level=a, sigma_max=0.9)  # fmt: skip
    assert x.mean().item() == pytest.approx(mean.item(), abs=4e-3)
    assert x.std().item() == pytest.approx(std.item(), rel=1e-2)
    # the closed-form log-density averaged over simulated samples is the Gaussian's negative entropy
    log_probs = gaussian_log_prob(x.float()[:, None], mean.expand(paths, 1), std.expand(paths, 1))
    expected = -0.5 * math.log(2 * math.pi * math.e * std.item() ** 2)
    assert log_probs.mean().item() == pytest.approx(expected, abs=2e-2)
    flow_std = SDE_DYNAMICS.get("flow_sde")(torch.ones(1, 1), torch.ones(1, 1), torch.tensor([sigma]),
                                            torch.tensor([sigma_next]), noise_level=a, sigma_max=0.9)[1]  # fmt: skip
    assert abs(x.std().item() - flow_std.item()) > 0.05  # Euler-Maruyama's frozen g over-estimates the spread
