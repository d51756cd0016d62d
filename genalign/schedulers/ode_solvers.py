"""Solvers for the deterministic (ODE) steps of a flow rollout, one small function each (MixGRPO-Flash style).

Rectified flow: ``sigma`` runs from 1 (noise) to 0 (data) and ``dx / dsigma = v(x, sigma)``. The deterministic step
of :mod:`genalign.schedulers.sde_dynamics` (``ode``) is first-order Euler. MixGRPO solves the ODE steps outside its
sliding SDE window with a second-order multistep solver (DPM-Solver++(2M)-style) to get the same image quality from
fewer network evaluations; here that solver is second-order Adams–Bashforth on the velocity (``ab2``), which reuses the
velocity of the previous step and so costs one network evaluation per step, like Euler.

Every solver has the same signature (one fixed signature per registry)::

    solver(sample, velocity, sigma, sigma_next, *, previous_velocity, previous_sigma) -> next_sample

``sample``/``velocity`` are ``[B, ...]`` float32, ``sigma``/``sigma_next`` are ``[B]``; ``previous_velocity``
``[B, ...]`` is the velocity the same deterministic trajectory had at ``previous_sigma`` ``[B]`` (the step before), or
None where there is none (first step, or the step before was stochastic): a multistep solver then takes an Euler step.

Only deterministic steps go through a solver: stochastic steps and their log-probabilities are always the scheduler's
:meth:`~genalign.schedulers.flow_sde.FlowSDEScheduler.step`, so re-scoring stored transitions is unaffected.
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor

from genalign.registry import Registry
from genalign.schedulers.options import OdeSolverName  # noqa: F401  (the solver names, defined without torch)
from genalign.schedulers.sde_dynamics import _per_sample


class OdeSolver(Protocol):
    def __call__(
        self,
        sample: Tensor,
        velocity: Tensor,
        sigma: Tensor,
        sigma_next: Tensor,
        *,
        previous_velocity: Tensor | None,
        previous_sigma: Tensor | None,
    ) -> Tensor: ...


#: solver name -> ``(sample, velocity, sigma, sigma_next, *, previous_velocity, previous_sigma) -> next_sample``
ODE_SOLVERS: Registry[OdeSolver] = Registry("ODE solver")


@ODE_SOLVERS.register(
    "euler",
    formula="x' = x + (sigma' - sigma) v_i",
    source="first-order rectified-flow step",
    summary="The scheduler's own deterministic step.",
)
def euler_solver(
    sample: Tensor,
    velocity: Tensor,
    sigma: Tensor,
    sigma_next: Tensor,
    *,
    previous_velocity: Tensor | None,
    previous_sigma: Tensor | None,
) -> Tensor:
    """First-order Euler step (the scheduler's ``ode`` dynamics); the previous velocity is ignored.

    Args:
        sample: ``[B, ...]`` current latent ``x_i``.
        velocity: ``[B, ...]`` velocity ``v_i`` at ``(x_i, sigma_i)``.
        sigma, sigma_next: ``[B]`` current and next noise level.

    Returns:
        ``[B, ...]`` next latent.
    """
    dt = _per_sample(sigma_next - sigma, sample)  # [B, 1, ...], negative
    return sample + dt * velocity  # [B, ...]


@ODE_SOLVERS.register(
    "ab2",
    source="MixGRPO-Flash (2nd-order ODE steps outside the SDE window)",
    formula="x' = x + h ((1 + r/2) v_i - (r/2) v_{i-1}), h = sigma' - sigma, r = h / (sigma - sigma_prev)",
    summary="Second-order Adams-Bashforth on the velocity for deterministic steps, no extra network call "
    "(benchmarks/ode_solver_results.md: closer to a 100-step reference than Euler from 6 evaluations on).",
)
def adams_bashforth2_solver(
    sample: Tensor,
    velocity: Tensor,
    sigma: Tensor,
    sigma_next: Tensor,
    *,
    previous_velocity: Tensor | None,
    previous_sigma: Tensor | None,
) -> Tensor:
    """Variable-step second-order Adams–Bashforth on the velocity: one network evaluation per step.

    The velocity is extrapolated linearly in ``sigma`` through ``(sigma_{i-1}, v_{i-1})`` and ``(sigma_i, v_i)`` and
    integrated over ``[sigma_i, sigma_{i+1}]``: ``x' = x + h ((1 + r/2) v_i - (r/2) v_{i-1})`` with ``h = sigma' -
    sigma`` and ``r = h / (sigma - sigma_{i-1})``. Local error ``O(h^3)``, global ``O(h^2)`` (Euler: ``O(h)``). Without a
    previous velocity it is the Euler step.

    Args:
        sample: ``[B, ...]`` current latent ``x_i``.
        velocity: ``[B, ...]`` velocity ``v_i``.
        sigma, sigma_next: ``[B]`` current and next noise level.
        previous_velocity: ``[B, ...]`` velocity ``v_{i-1}`` of the same deterministic trajectory, or None.
        previous_sigma: ``[B]`` noise level ``sigma_{i-1}`` of ``previous_velocity``.

    Returns:
        ``[B, ...]`` next latent.
    """
    if previous_velocity is None:
        return euler_solver(
            sample, velocity, sigma, sigma_next, previous_velocity=None, previous_sigma=None
        )  # [B, ...]
    if previous_sigma is None:
        raise ValueError("ab2 was given previous_velocity without previous_sigma; pass both or neither.")
    h = _per_sample(sigma_next - sigma, sample)  # [B, 1, ...], negative
    ratio = h / _per_sample(sigma - previous_sigma, sample)  # [B, 1, ...], positive
    return sample + h * ((1 + ratio / 2) * velocity - (ratio / 2) * previous_velocity)  # [B, ...]


def get_ode_solver(name: str) -> OdeSolver:
    """Return the registered solver ``name`` (raises with a did-you-mean list)."""
    return ODE_SOLVERS.get(name)
