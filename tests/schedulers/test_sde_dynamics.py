"""Hand-computed values of every dynamics and of the Gaussian step log-probability (formulas.md §5)."""

import math

import pytest
import torch

from genalign.registry import UnknownOptionError
from genalign.schedulers.sde_dynamics import SDE_DYNAMICS, gaussian_log_prob

X, V, SIGMA, SIGMA_NEXT = 1.0, 2.0, 0.5, 0.25


def _step(
    name: str, noise_level: float, *, sigma: float = SIGMA, sigma_next: float = SIGMA_NEXT, sigma_max: float = 0.9
):
    sample = torch.full((1, 1), X)
    velocity = torch.full((1, 1), V)
    mean, std = SDE_DYNAMICS.get(name)(
        sample,
        velocity,
        torch.tensor([sigma]),
        torch.tensor([sigma_next]),
        noise_level=noise_level,
        sigma_max=sigma_max,
    )
    return mean.item(), std.item()


@pytest.mark.parametrize(
    ("name", "expected_mean", "expected_std"),
    [
        # g = 0.5 sqrt(0.5 / 0.5) = 0.5; mean = 1 (1 - 0.25^2) + 2 (1 + 0.125) (-0.25) = 0.375; std = 0.5 sqrt(0.25)
        ("flow_sde", 0.375, 0.25),
        # x0 = 1 - 0.5 * 2 = 0; score = -(1 - 0) / 0.25 = -4; mean = 1 - 0.5 - 0.5 * 0.25 * (-4) * (-0.25) = 0.375
        ("dance_sde", 0.375, 0.25),
        # std = 0.25 sin(pi / 4); x0 = 0, x1 = 1 + 0.5 * 2 = 2; mean = sqrt(0.0625 - 0.03125) * 2
        ("cps", math.sqrt(0.03125) * 2, 0.25 * math.sin(math.pi / 4)),
        ("ode", 0.5, 0.0),
    ],
)
def test_dynamics_match_hand_computed_values(name, expected_mean, expected_std):
    mean, std = _step(name, 0.5)
    assert mean == pytest.approx(expected_mean, abs=1e-6)
    assert std == pytest.approx(expected_std, abs=1e-6)


def test_flow_sde_replaces_sigma_one_by_sigma_max_in_the_denominator():
    # g = 0.5 sqrt(1 / (1 - 0.5)); g^2 = 0.5; dt = -0.5; mean = 1 (1 + 0.5 / 2 * -0.5) + 2 * 1 * -0.5 = -0.125
    mean, std = _step("flow_sde", 0.5, sigma=1.0, sigma_next=0.5, sigma_max=0.5)
    assert mean == pytest.approx(-0.125, abs=1e-6)
    assert std == pytest.approx(0.5, abs=1e-6)


@pytest.mark.parametrize("name", ["flow_sde", "dance_sde", "cps", "ode"])
def test_noise_level_zero_is_the_euler_step(name):
    torch.manual_seed(0)
    sample, velocity = torch.randn(3, 4, 5), torch.randn(3, 4, 5)
    sigma, sigma_next = torch.tensor([0.9, 0.5, 0.2]), torch.tensor([0.7, 0.3, 0.0])
    mean, std = SDE_DYNAMICS.get(name)(sample, velocity, sigma, sigma_next, noise_level=0.0, sigma_max=0.9)
    euler = sample + (sigma_next - sigma)[:, None, None] * velocity
    torch.testing.assert_close(mean, euler, rtol=0, atol=1e-6)
    assert torch.all(std == 0)


def test_per_sample_noise_levels_mix_sde_and_ode_samples():
    sample, velocity = torch.ones(2, 3), torch.full((2, 3), 2.0)
    sigma, sigma_next = torch.full((2,), SIGMA), torch.full((2,), SIGMA_NEXT)
    mean, std = SDE_DYNAMICS.get("flow_sde")(
        sample, velocity, sigma, sigma_next, noise_level=torch.tensor([0.5, 0.0]), sigma_max=0.9
    )
    assert mean[:, 0].tolist() == pytest.approx([0.375, 0.5])
    assert std.flatten().tolist() == pytest.approx([0.25, 0.0])


def test_gaussian_log_prob_matches_torch_distributions_mean_and_sum():
    torch.manual_seed(0)
    sample, mean = torch.randn(4, 2, 3), torch.randn(4, 2, 3)
    std = torch.tensor([0.1, 0.5, 1.0, 2.0]).view(4, 1, 1)
    density = torch.distributions.Normal(mean, std.expand_as(mean)).log_prob(sample)  # [4, 2, 3]
    torch.testing.assert_close(gaussian_log_prob(sample, mean, std), density.flatten(1).mean(1))
    torch.testing.assert_close(gaussian_log_prob(sample, mean, std, reduction="sum"), density.flatten(1).sum(1))
    assert gaussian_log_prob(sample.double(), mean.double(), std.double()).dtype == torch.float32


def test_gaussian_log_prob_of_a_deterministic_step_is_zero_and_bad_reduction_raises():
    assert gaussian_log_prob(torch.ones(1, 2), torch.ones(1, 2), torch.zeros(1, 1)).item() == 0.0
    with pytest.raises(ValueError, match="reduction='max'"):
        gaussian_log_prob(torch.ones(1, 2), torch.ones(1, 2), torch.ones(1, 1), reduction="max")


def test_unknown_dynamics_suggests_the_closest_name():
    with pytest.raises(UnknownOptionError, match="Did you mean 'flow_sde'"):
        SDE_DYNAMICS.get("flow_sd")
