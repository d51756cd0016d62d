"""Step-level credit for flow models: noise-aware step weights (TempFlow-GRPO [168]) and dense per-step advantages
from reward gains (DenseGRPO [148]). The action axis ``T`` is the denoising steps."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.signals import declare_signal

declare_signal("step_rewards", ("N", "S+1"), "rollout",
               "The reward of the output completed deterministically from each state x_0 .. x_S of a trajectory "
               "(entry S is the final output's reward), measured at rollout time with the trainer's reward.",
               source="[148] DenseGRPO, [67] VGPO", needs_rewards=True)  # fmt: skip


def noise_aware_step_weights(step_std: Tensor, trained: Tensor) -> Tensor:
    """TempFlow-GRPO [168] noise-aware weights: each trained step is weighted by its transition std (its exploration
    potential; early, noisy steps weigh more), normalised to mean 1 over the trained steps of each sample.

    Args:
        step_std: ``[S]`` or ``[N, S]`` std of each step's transition at the configured noise level.
        trained: ``[N, S]`` bool, the trained steps.

    Returns:
        ``[N, S]`` float32 weights, 0 on untrained steps.
    """
    std = step_std.float().expand(trained.shape) * trained.float()  # [N, S]
    mean = std.sum(dim=1, keepdim=True) / trained.float().sum(dim=1, keepdim=True).clamp_min(1.0)  # [N, 1]
    return torch.where(mean > 0, std / mean.clamp_min(1e-12), torch.zeros_like(std))  # [N, S]


@CREDIT_RULES.register(
    "noise_aware_steps",
    needs=("step_std",),
    formula="w_it = σ_it / mean_{trained t}(σ_it); A_it = A_it · w_it",
    source="[168] TempFlow-GRPO",
    summary="Weigh each trained denoising step by its transition std (noisier steps explore more).",
)
def noise_aware_steps(advantages: Tensor, batch: StepBatch) -> Tensor:
    """TempFlow-GRPO [168]: multiply each trained step's advantage by its noise-aware weight
    (:func:`noise_aware_step_weights` of ``step_std`` over the trained steps ``mask > 0``)."""
    step_std = batch.require("step_std", "credit rule 'noise_aware_steps'")
    weights = noise_aware_step_weights(step_std.cpu(), batch.mask.cpu() > 0).to(advantages.device)  # [N, T]
    return advantages * weights


def dense_step_advantages(step_rewards: Tensor, group_ids: Tensor, *, eps: float = 1e-4) -> Tensor:
    """DenseGRPO [148]: the dense reward of step ``t`` is the reward gain of its ODE-completed prediction,
    ``g_t = R(x̂_0 | x_{t+1}) - R(x̂_0 | x_t)``; each step's gains are normalised within the group,
    ``(g_t - mean_group(g_t)) / (std_group(g_t) + eps)`` (population std).

    Args:
        step_rewards: ``[N, S + 1]`` reward of the ODE completion from each state ``x_0 .. x_S`` (entry ``S`` is the
            final output's reward); NaN where a state was not probed.
        group_ids: ``[N]`` group of each sample.

    Returns:
        ``[N, S]`` per-step advantages (NaN where a gain is unknown).
    """
    gains = step_rewards[:, 1:].float() - step_rewards[:, :-1].float()  # [N, S]
    _, inverse = group_ids.unique(return_inverse=True)  # [N]
    num_groups = int(inverse.max()) + 1
    one_hot = torch.nn.functional.one_hot(inverse, num_groups).float().to(gains.device)  # [N, G]
    counts = one_hot.sum(0)[:, None]  # [G, 1]
    mean = (one_hot.T @ gains) / counts  # [G, S]
    var = (one_hot.T @ gains**2) / counts - mean**2  # [G, S]
    std = var.clamp_min(0).sqrt()  # [G, S]
    return (gains - one_hot @ mean) / (one_hot @ std + eps)  # [N, S]


@CREDIT_RULES.register(
    "dense_step_gains",
    needs=("step_rewards",),
    replaces=True,
    formula="g_it = R(x̂_0 | x_{t+1}) − R(x̂_0 | x_t); A_it = (g_it − mean_group) / (std_group + ε)",
    source="[148] DenseGRPO",
    summary="Per-step advantages from the reward gain of each step's ODE-completed prediction, normalised per group.",
)
def dense_step_gains(advantages: Tensor, batch: StepBatch, *, eps: float = 1e-4) -> Tensor:
    """DenseGRPO [148] per-step advantages from ``step_rewards`` (measured by the policy at rollout time),
    0 on untrained steps and where a gain is unknown.

    Args:
        advantages: ``[N, T]`` incoming advantages (replaced).
        batch: reads ``step_rewards`` ``[N, T + 1]``, ``group_ids`` and ``mask``.
        eps: added to the per-group standard deviation of each step's gains.
    """
    step_rewards = batch.require("step_rewards", "credit rule 'dense_step_gains'")
    dense = dense_step_advantages(step_rewards.cpu(), batch.group_ids.cpu(), eps=eps).nan_to_num(0.0)  # [N, T]
    return (dense * (batch.mask.cpu() > 0).float()).to(device=advantages.device, dtype=advantages.dtype)
