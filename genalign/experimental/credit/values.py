"""VGPO [67] temporal credit: dense, process-aware values of each denoising step from the rewards of the outputs
completed deterministically (ODE) from the trajectory's states (``step_rewards``, the measurement DenseGRPO
[148] uses), normalised per step within the group with the value-anchored rule of
:func:`genalign.experimental.advantages.value_anchored.value_anchored`. The action axis ``T`` is the denoising steps."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.experimental.advantages.value_anchored import value_anchored


def cumulative_step_values(step_rewards: Tensor, *, gamma: float) -> Tensor:
    """Process-aware value of each step: the discounted mean of the values of the states after it.

    ``Q_t = Σ_{k>t} γ^{k−t−1} V_k / Σ_{k>t} γ^{k−t−1}`` over the probed (non-NaN) states ``k = t+1 .. S``, where
    ``V_k = step_rewards[:, k]`` is the reward of the output completed by the ODE from state ``x_k`` (an estimate of the
    final reward expected from that state). ``gamma = 0`` gives ``V_{t+1}``, the value of the state the step leads to;
    ``gamma = 1`` the plain mean of every later value.

    Args:
        step_rewards: ``[N, S + 1]`` values of the states ``x_0 .. x_S``; NaN where a state was not probed.
        gamma: discount in ``[0, 1]``.

    Returns:
        ``[N, S]`` float32; NaN where no later state was probed.
    """
    values = step_rewards.float()[:, 1:]  # [N, S]: V_{t+1} for step t
    num_steps = values.shape[1]
    probed = ~torch.isnan(values)  # [N, S]
    k = torch.arange(num_steps)
    offset = (k[None, :] - k[:, None]).float()  # [S(t), S(k)]: k - t for the state after step k
    discount = torch.where(offset >= 0, torch.tensor(gamma).pow(offset.clamp_min(0)), 0.0)  # [S, S]
    weights = discount[None] * probed[:, None, :].float()  # [N, S(t), S(k)]
    total = (weights * torch.nan_to_num(values)[:, None, :]).sum(-1)  # [N, S]
    norm = weights.sum(-1)  # [N, S]
    return torch.where(norm > 0, total / norm.clamp_min(1e-12), torch.nan)


@CREDIT_RULES.register(
    "vgpo_values",
    needs=("step_rewards",),
    replaces=True,
    formula="Q_it = Σ_{k>t} γ^{k−t−1} V_ik / Σ γ^{k−t−1}, V_ik = R(ODE(x_k)); "
    "A_it = (Q_it − mean_G Q_t)/(std_G + ε) + α·exp(−std_G/τ)·(Q_it − b)",
    source="[67] VGPO",
    summary="Per-step advantages from discounted values of the ODE-completed later states, normalised per step "
    "within the group with an absolute anchor (no vanishing signal for constant groups).",
)
def vgpo_values(
    advantages: Tensor,
    batch: StepBatch,
    *,
    gamma: float = 0.9,
    anchor: float = 0.5,
    alpha: float = 1.0,
    tau: float = 0.05,
    eps: float = 1e-6,
) -> Tensor:
    """VGPO [67] temporal value credit and value-anchored normalisation.

    Step ``t`` of sample ``i`` is credited with ``Q_it`` (:func:`cumulative_step_values`), the expected reward of the
    stages after it, rather than the terminal reward every step shares; ``Q`` is then normalised across the group at
    the same step by :func:`~genalign.experimental.advantages.value_anchored.value_anchored` (relative term plus an
    absolute term anchored at ``anchor``).

    Reading chosen: the abstract's "dense, process-aware value estimates ... modeling the expected cumulative reward
    at each generative stage" is read as a discounted mean of the ODE-completion rewards of the later states (the
    policy probes every state a trained step starts or ends at, so later untrained states are skipped); ``gamma = 0.9``
    is genalign's default. Unlike DenseGRPO's ``dense_step_gains`` (the gain ``V_{t+1} − V_t`` of one step), a step is
    valued by where the trajectory goes from it.

    Args:
        advantages: ``[N, T]`` incoming advantages (replaced).
        batch: reads ``step_rewards`` ``[N, T + 1]``, ``group_ids`` and ``mask``.
        gamma: discount over later states in ``[0, 1]``.
        anchor, alpha, tau, eps: the value-anchored normalisation of each step's values.

    Returns:
        ``[N, T]``; 0 on untrained steps and where no later state was probed.
    """
    if not 0 <= gamma <= 1:
        raise ValueError(f"vgpo_values: gamma={gamma!r} must be in [0, 1] (0.9 by default).")
    step_rewards = batch.require("step_rewards", "credit rule 'vgpo_values'").cpu()  # [N, T + 1]
    values = cumulative_step_values(step_rewards, gamma=gamma)  # [N, T]
    trained = batch.mask.cpu() > 0  # [N, T]
    values = torch.where(trained, values, torch.nan)  # untrained steps take no part in the group statistics
    credit = value_anchored(values.double(), batch.group_ids.cpu(), anchor=anchor, alpha=alpha, tau=tau, eps=eps)
    return credit.nan_to_num(0.0).to(device=advantages.device, dtype=advantages.dtype)  # [N, T]
