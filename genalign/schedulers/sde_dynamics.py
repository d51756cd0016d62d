"""One small function per flow-matching step dynamics, and the step log-probability in two forms: the Gaussian
log-density (default) and Flow-GRPO's published CPS form ``−(x' − mean)²`` (:func:`step_log_prob`).

Rectified flow: ``sigma`` runs from 1 (noise) to 0 (data), the model predicts the velocity ``v`` and the deterministic
Euler step is ``x' = x + (sigma' - sigma) * v`` (shared/reference/formulas.md §5). A stochastic dynamics turns that ODE
step into a Gaussian transition ``x' ~ N(mean, std^2)`` whose log-density is the policy's per-step log-probability.

Every dynamics has the same signature (one fixed signature per registry)::

    dynamics(sample, velocity, sigma, sigma_next, *, noise_level, sigma_max) -> (mean, std)

``sample``/``velocity`` are ``[B, ...]`` float32 latents, ``sigma``/``sigma_next`` are ``[B]`` (one noise level per
sample), ``noise_level`` is the dynamics' strength (``a`` or ``eta``; a float or a ``[B]`` tensor, so that one batch
can mix stochastic and deterministic samples at the same step), ``sigma_max`` is the first sigma below 1 of the
schedule (Flow-GRPO replaces ``sigma = 1`` by it in a denominator). ``mean`` is ``[B, ...]`` and ``std`` is ``[B, 1, ...]``
(broadcastable). With ``noise_level = 0`` every dynamics returns the Euler mean and ``std = 0``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, Protocol

import torch
from torch import Tensor

from genalign.registry import Registry


class Dynamics(Protocol):
    def __call__(
        self,
        sample: Tensor,
        velocity: Tensor,
        sigma: Tensor,
        sigma_next: Tensor,
        *,
        noise_level: float | Tensor,
        sigma_max: float,
    ) -> tuple[Tensor, Tensor]: ...


#: dynamics name -> ``(sample, velocity, sigma, sigma_next, *, noise_level, sigma_max) -> (mean, std)``
SDE_DYNAMICS: Registry[Dynamics] = Registry("SDE dynamics", catalogue="genalign.experimental.dynamics")


def _per_sample(value: Tensor | float, like: Tensor) -> Tensor:
    """Turn a float or a ``[B]`` tensor into ``[B, 1, ..., 1]`` so that it broadcasts against ``like`` ``[B, ...]``."""
    value = torch.as_tensor(value, dtype=like.dtype, device=like.device).expand(like.shape[0])
    return value.reshape(like.shape[0], *([1] * (like.dim() - 1)))


@SDE_DYNAMICS.register(
    "ode",
    formula="x' = x + (sigma' - sigma) v, std = 0",
    source="rectified-flow Euler step",
    summary="Deterministic step (no exploration, no log-prob): the steps outside the SDE window.",
)
def ode_step(
    sample: Tensor,
    velocity: Tensor,
    sigma: Tensor,
    sigma_next: Tensor,
    *,
    noise_level: float | Tensor,
    sigma_max: float,
) -> tuple[Tensor, Tensor]:
    """Deterministic Euler step of the probability-flow ODE; ``noise_level`` and ``sigma_max`` are ignored."""
    dt = _per_sample(sigma_next - sigma, sample)  # [B, 1, ...], negative
    mean = sample + dt * velocity  # [B, ...]
    return mean, torch.zeros_like(dt)


@SDE_DYNAMICS.register(
    "flow_sde",
    source="Flow-GRPO [319]",
    formula="g = a sqrt(sigma / (1 - sigma))",
    summary="Flow-GRPO's ODE-to-SDE conversion with the same marginals; Euler-Maruyama step with a Gaussian log-prob.",
)
def flow_sde_step(
    sample: Tensor,
    velocity: Tensor,
    sigma: Tensor,
    sigma_next: Tensor,
    *,
    noise_level: float | Tensor,
    sigma_max: float,
) -> tuple[Tensor, Tensor]:
    """Flow-GRPO's marginal-preserving SDE [319].

    ``g = a * sqrt(sigma / (1 - sigma))`` (``sigma = 1`` replaced by ``sigma_max`` in the denominator),
    ``mean = x (1 + g^2 dt / (2 sigma)) + v (1 + g^2 (1 - sigma) / (2 sigma)) dt``, ``std = g sqrt(-dt)``.
    """
    s = _per_sample(sigma, sample)  # [B, 1, ...]
    dt = _per_sample(sigma_next - sigma, sample)  # [B, 1, ...]
    denominator = 1 - torch.where(s == 1, torch.full_like(s, sigma_max), s)
    g = _per_sample(noise_level, sample) * torch.sqrt(s / denominator)  # [B, 1, ...]
    mean = sample * (1 + g**2 / (2 * s) * dt) + velocity * (1 + g**2 * (1 - s) / (2 * s)) * dt  # [B, ...]
    return mean, g * torch.sqrt(-dt)


@SDE_DYNAMICS.register(
    "dance_sde",
    source="DanceGRPO",
    formula="mean = x + dt v - eta^2/2 score dt",
    summary="DanceGRPO's SDE: score-corrected mean with a constant noise scale eta.",
)
def dance_sde_step(
    sample: Tensor,
    velocity: Tensor,
    sigma: Tensor,
    sigma_next: Tensor,
    *,
    noise_level: float | Tensor,
    sigma_max: float,
) -> tuple[Tensor, Tensor]:
    """DanceGRPO's SDE with a constant diffusion ``eta = noise_level``.

    ``x0 = x - sigma v``, ``score = -(x - (1 - sigma) x0) / sigma^2``, ``mean = x + dt v - eta^2 / 2 * score * dt``,
    ``std = eta sqrt(sigma - sigma')``. ``sigma_max`` is unused.
    """
    s = _per_sample(sigma, sample)  # [B, 1, ...]
    dt = _per_sample(sigma_next - sigma, sample)  # [B, 1, ...]
    predicted_data = sample - s * velocity  # [B, ...]
    score = -(sample - (1 - s) * predicted_data) / s**2  # [B, ...]
    eta = _per_sample(noise_level, sample)  # [B, 1, ...]
    mean = sample + dt * velocity - 0.5 * eta**2 * score * dt  # [B, ...]
    return mean, eta * torch.sqrt(-dt)


@SDE_DYNAMICS.register(
    "cps",
    source="coefficient-preserving sampling",
    formula="std = sigma' sin(a pi / 2)",
    summary="Noise injected so that the signal and noise coefficients of x' stay those of the schedule.",
)
def cps_step(
    sample: Tensor,
    velocity: Tensor,
    sigma: Tensor,
    sigma_next: Tensor,
    *,
    noise_level: float | Tensor,
    sigma_max: float,
) -> tuple[Tensor, Tensor]:
    """Coefficient-preserving sampling: the next latent keeps the exact data/noise coefficients of rectified flow.

    ``x0 = x - sigma v``, ``x1 = x + (1 - sigma) v``, ``std = sigma' sin(a pi / 2)``,
    ``mean = (1 - sigma') x0 + sqrt(sigma'^2 - std^2) x1``. The last step (``sigma' = 0``) is deterministic.
    """
    s = _per_sample(sigma, sample)  # [B, 1, ...]
    s_next = _per_sample(sigma_next, sample)  # [B, 1, ...]
    std = s_next * torch.sin(_per_sample(noise_level, sample) * math.pi / 2)  # [B, 1, ...]
    predicted_data = sample - s * velocity  # [B, ...]
    predicted_noise = sample + (1 - s) * velocity  # [B, ...]
    mean = (1 - s_next) * predicted_data + torch.sqrt((s_next**2 - std**2).clamp_min(0)) * predicted_noise
    return mean, std


LogProbReduction = Literal["mean", "sum"]

#: How a transition is scored: the Gaussian log-density (``gaussian``) or Flow-GRPO's published CPS form
#: (``squared_error``), see :func:`step_log_prob`.
LogProbForm = Literal["gaussian", "squared_error"]


def gaussian_log_prob(sample: Tensor, mean: Tensor, std: Tensor, *, reduction: LogProbReduction = "mean") -> Tensor:
    """Log-density of ``sample`` under ``N(mean, std^2)`` reduced over every non-batch element, in float32.

    Args:
        sample: ``[B, ...]`` the next latent.
        mean: ``[B, ...]`` the transition mean.
        std: ``[B, 1, ...]`` the transition standard deviation (broadcastable to ``sample``).
        reduction: ``"mean"`` averages over latent elements as the Flow-GRPO / DanceGRPO reference code does (keeps
            ratios near 1); ``"sum"`` gives the true joint log-density.

    Returns:
        ``[B]`` float32. Deterministic transitions (``std == 0``) have log-probability 0: they are certain and are
        never actions (the policy masks them out).
    """
    sample, mean, std = sample.float(), mean.float(), std.float()
    deterministic = std == 0  # [B, 1, ...]
    safe_std = torch.where(deterministic, torch.ones_like(std), std)
    log_density = -((sample - mean) ** 2) / (2 * safe_std**2) - torch.log(safe_std) - 0.5 * math.log(2 * math.pi)
    log_density = torch.where(deterministic, torch.zeros_like(log_density), log_density)  # [B, ...]
    flat = log_density.flatten(1)  # [B, D]
    if reduction == "mean":
        return flat.mean(dim=1)
    if reduction == "sum":
        return flat.sum(dim=1)
    raise ValueError(f"reduction={reduction!r} is not supported; use 'mean' or 'sum'.")


def squared_error_log_prob(
    sample: Tensor, mean: Tensor, std: Tensor, *, reduction: LogProbReduction = "mean"
) -> Tensor:
    """Flow-GRPO's published CPS step score ``−(x' − mean)²`` reduced over every non-batch element, in float32.

    Flow-GRPO's CPS code (``flow_grpo/diffusers_patch/sd3_sde_with_logprob.py``, branch ``sde_type == 'cps'``:
    ``log_prob = -((prev_sample.detach() - prev_sample_mean) ** 2)``, then the mean over all but the batch axis) drops
    every constant of the Gaussian log-density, the ``1 / (2 std²)`` factor included. Relation to
    :func:`gaussian_log_prob` (same ``reduction``, ``std`` constant over a sample's elements)::

        gaussian = squared_error / (2 std²) − log std − ½ log 2π      (per element, then reduced)

    so between two policies scoring the same stored ``x'`` (same ``std``: the schedule fixes it) the log-ratios obey
    ``Δ squared_error = 2 std² · Δ gaussian``: the published CPS ratio is the Gaussian ratio raised to ``2 std²``.
    A PPO clip range ``ε`` on the published ratio therefore bounds the Gaussian ratio by ``(1 + ε)^{1 / (2 std²)}``,
    far wider on late, low-noise steps (``std → 0``) and narrower on early ones; a Flow-GRPO CPS recipe's clip range
    only means the same thing with this form. Deterministic transitions (``std == 0``) score 0, as in
    :func:`gaussian_log_prob` (they are never actions).

    Args:
        sample: ``[B, ...]`` the next latent.
        mean: ``[B, ...]`` the transition mean.
        std: ``[B, 1, ...]`` the transition standard deviation (only its zeros are read).
        reduction: ``"mean"`` (the published code) or ``"sum"`` over latent elements.

    Returns:
        ``[B]`` float32.
    """
    sample, mean, std = sample.float(), mean.float(), std.float()
    score = -((sample - mean) ** 2)  # [B, ...]
    score = torch.where(std == 0, torch.zeros_like(score), score)  # [B, ...]
    flat = score.flatten(1)  # [B, D]
    if reduction == "mean":
        return flat.mean(dim=1)
    if reduction == "sum":
        return flat.sum(dim=1)
    raise ValueError(f"reduction={reduction!r} is not supported; use 'mean' or 'sum'.")


def step_log_prob(
    sample: Tensor,
    mean: Tensor,
    std: Tensor,
    *,
    form: LogProbForm = "gaussian",
    reduction: LogProbReduction = "mean",
) -> Tensor:
    """The per-step log-probability of a transition ``[B]``: :func:`gaussian_log_prob` (``form="gaussian"``, the true
    log-density) or :func:`squared_error_log_prob` (``form="squared_error"``, Flow-GRPO's published CPS form)."""
    if form == "gaussian":
        return gaussian_log_prob(sample, mean, std, reduction=reduction)
    if form == "squared_error":
        return squared_error_log_prob(sample, mean, std, reduction=reduction)
    raise ValueError(f"log_prob_form={form!r} is not supported; use 'gaussian' or 'squared_error'.")


def get_dynamics(name: str) -> Callable[..., tuple[Tensor, Tensor]]:
    """Return the registered dynamics ``name`` (raises with a did-you-mean list)."""
    return SDE_DYNAMICS.get(name)


def _log_integrated_terms(sigma: Tensor, sigma_next: Tensor, sigma_max: float) -> tuple[Tensor, Tensor]:
    """``(I_var, I_drift)`` ``[B, 1, ...]``: ``∫ s / (1 - s) ds`` and ``∫ 1 / (1 - s) ds`` over ``[sigma', sigma]``,
    with ``1 - s`` held at ``1 - sigma_max`` above ``sigma_max`` (the cap Flow-GRPO puts on ``sigma = 1``)."""
    low, low_next = sigma.clamp(max=sigma_max), sigma_next.clamp(max=sigma_max)  # the uncapped part of the step
    high, high_next = sigma.clamp(min=sigma_max), sigma_next.clamp(min=sigma_max)  # the capped part (first step)
    log_term = torch.log((1 - low_next) / (1 - low))  # [B, 1, ...] >= 0
    capped = max(1 - sigma_max, 1e-12)
    integral_var = log_term - (low - low_next) + (high**2 - high_next**2) / (2 * capped)
    integral_drift = log_term + (high - high_next) / capped
    return integral_var, integral_drift
