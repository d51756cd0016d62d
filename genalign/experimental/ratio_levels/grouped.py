"""Ratio levels with structure inside the sequence (method catalogue II): importance ratios per entropy group of tokens
(ESPO [103]) and FiberPO's nested gates, a trajectory-level gate on the sequence ratio and a token-level gate on each
token's residual (FiberPO [108]). Signature: :mod:`genalign.algorithms.ratio_levels.base`; shapes ``[N, T]``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.ratio_levels.base import RATIO_LEVELS, ClipFn, LevelOutput, level_output, row_mean


def entropy_groups(entropy: Tensor, mask: Tensor, num_groups: int) -> Tensor:
    """``[N, T]`` long: the entropy group of each action, ``0 .. K−1`` by rank of its entropy among the valid actions
    of its sequence (group ``k`` holds the ranks ``[k·n/K, (k+1)·n/K)``, ``n`` = valid actions; ties keep their
    position order). Padding gets group ``K − 1`` (it carries no loss)."""
    valid = mask > 0
    keyed = torch.where(valid, entropy, torch.inf)  # [N, T] padding sorts last
    order = torch.argsort(keyed, dim=1, stable=True)  # [N, T]
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(entropy.shape[1], device=entropy.device).expand_as(order).contiguous())
    count = valid.sum(1, keepdim=True).clamp_min(1)  # [N, 1]
    group = torch.div(rank * num_groups, count, rounding_mode="floor").clamp_max(num_groups - 1)  # [N, T]
    return torch.where(valid, group, num_groups - 1)


def group_mean(values: Tensor, mask: Tensor, groups: Tensor, num_groups: int) -> Tensor:
    """Masked mean of ``values`` over each (row, group), broadcast back to ``[N, T]``."""
    n, t = values.shape
    key = (torch.arange(n, device=values.device)[:, None] * num_groups + groups).flatten()  # [N*T]
    sums = values.new_zeros(n * num_groups).index_add(0, key, (values * mask).flatten())  # [N*K]
    counts = values.new_zeros(n * num_groups).index_add(0, key, mask.flatten())  # [N*K]
    return (sums / counts.clamp_min(1.0))[key].view(n, t)  # [N, T]


@RATIO_LEVELS.register(
    "entropy_grouped",
    needs=("entropy",),
    formula="tokens of o_i split into K groups by entropy rank; r_{i,k} = exp(mean_{t∈k} ℓ_it), clipped per group "
    "and placed on its actions; the clip form sees the group's mean entropy",
    source="[103] ESPO (entropy importance sampling)",
    summary="Importance ratio per entropy group of tokens, between GRPO's token ratio and GSPO's sequence ratio; "
    "with clip=entropy_adaptive each group gets a trust region sized by its uncertainty.",
)
def entropy_grouped_level(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_fn: ClipFn,
    batch: StepBatch,
    *,
    num_groups: int = 4,
) -> LevelOutput:
    """ESPO [103]: each sequence is decomposed into groups of tokens by predictive entropy; each group gets one
    importance ratio, the geometric mean of its token ratios ``exp(mean_{t∈k} ℓ_t)`` (GSPO's form inside the group),
    clipped once per group, so one outlier token cannot discard the whole response (GSPO's "gradient
    underutilization") while the ratio stays less noisy than per token. With ``clip="entropy_adaptive"`` the clip form
    receives each group's mean entropy, which is ESPO's entropy-adaptive clipping.

    Reading chosen: the abstract does not say how groups are formed; genalign ranks the valid tokens of each sequence
    by entropy and cuts the ranks into ``K`` equal-size quantile groups (``K = 4``; ``K = 1`` is GSPO's sequence
    ratio, ``K = |o_i|`` the token ratio). The entropy is the scoring pass's (detached; at the first inner step the
    sampling policy's).

    Args:
        log_ratio, advantages, mask: ``[N, T]``.
        clip_fn: the chosen clip form.
        batch: ``entropy`` ``[N, T]`` is required.
        num_groups: ``K >= 1``.
    """
    if num_groups < 1:
        raise ValueError(f"num_groups must be >= 1 (entropy groups per sequence), got {num_groups!r}")
    entropy = require(batch, "entropy", "ratio level 'entropy_grouped'")
    groups = entropy_groups(entropy, mask, num_groups)  # [N, T]
    grouped = group_mean(log_ratio, mask, groups, num_groups)  # [N, T]
    grouped_batch = batch.with_values(entropy=group_mean(entropy, mask, groups, num_groups))
    clipped = clip_fn(grouped, advantages, grouped_batch)
    return level_output(advantages, clipped.log_weight, grouped, clipped)


@RATIO_LEVELS.register(
    "fiber",
    formula="s_i = mean_t ℓ_it (base), δ_it = ℓ_it − s_i (fiber); ℓ̃_it = gate_base(s_i) + gate_fiber(δ_it), "
    "gate_base = the clip form, gate_fiber = sign-aware clip of δ to [log(1−ε_f⁻), log(1+ε_f⁺)]",
    source="[108] FiberPO (fiber bundle gating)",
    summary="Two-level gates: a trust region on the trajectory's aggregate ratio and an independent one on each "
    "token's residual around it; identity Jacobian on-policy.",
)
def fiber_level(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_fn: ClipFn,
    batch: StepBatch,
    *,
    fiber_eps_low: float = 0.2,
    fiber_eps_high: float = 0.2,
) -> LevelOutput:
    """FiberPO [108]: the log-ratio of every token is decomposed into the trajectory's aggregate (the base,
    ``s_i = mean_t ℓ_{i,t}``, GSPO's sequence log-ratio) and the token's residual around it (the fiber,
    ``δ_{i,t} = ℓ_{i,t} − s_i``). The base gate is the chosen clip form applied to ``s_i`` (use GSPO-size bounds, e.g.
    ``eps_low = 3e-4``, ``eps_high = 4e-4``); the fiber gate clips the residual, sign-aware as PPO, to
    ``[log(1 − ε_f⁻), log(1 + ε_f⁺)]``. Each level censors its own component, with its own budget: a closed base gate
    freezes the trajectory's aggregate (the tokens' gradients then sum to 0 over the trajectory: only the
    redistribution among its tokens goes on), a token whose residual leaves the fiber band loses its share of that
    redistribution. Surrogate ``A·exp(ℓ̃)`` per token; with one action per sequence it is the token level.

    On-policy ``∂ℓ̃_t/∂ℓ_u = 1/|o| + (δ_tu − 1/|o|) = δ_tu``: the Jacobian is block-diagonal over trajectories and the
    identity, so the first step is exactly the token-level policy gradient.

    Reading chosen: the abstract names the two gates but not their form; genalign adds, in log space, the chosen clip
    form on the base and a PPO-style clip of the residual (APC-Obj's censoring: a gated component keeps its value and
    loses its gradient), with independent budgets per level as in FiberPO-Domain; the deeper hierarchy (domain and
    prompt-group levels) is not implemented.

    Args:
        log_ratio, advantages, mask: ``[N, T]``.
        clip_fn: the chosen clip form, applied to the base ``s_i``.
        batch: unused.
        fiber_eps_low, fiber_eps_high: the fiber band as ratio offsets, ``0 <= ε_f⁻ < 1``, ``ε_f⁺ >= 0``.
    """
    if not (0 <= fiber_eps_low < 1 and fiber_eps_high >= 0):
        raise ValueError(
            f"need 0 <= fiber_eps_low < 1 and fiber_eps_high >= 0 (the fiber band as ratio offsets), got "
            f"fiber_eps_low={fiber_eps_low!r}, fiber_eps_high={fiber_eps_high!r}"
        )
    low, high = math.log1p(-fiber_eps_low), math.log1p(fiber_eps_high)
    base = row_mean(log_ratio, mask).expand_as(log_ratio)  # [N, T] s_i
    gated_base = clip_fn(base, advantages)
    residual = log_ratio - base  # [N, T] δ_it
    fiber_high = (advantages > 0) & (residual > high)  # [N, T]
    fiber_low = (advantages < 0) & (residual < low)  # [N, T]
    gated_residual = torch.where(fiber_high, high, torch.where(fiber_low, low, residual))  # [N, T]
    log_weight = gated_base.log_weight + gated_residual  # [N, T]
    out = level_output(advantages, log_weight, log_ratio, gated_base)
    return replace(
        out, clipped_low=gated_base.clipped_low | fiber_low, clipped_high=gated_base.clipped_high | fiber_high
    )


__all__ = ["entropy_grouped_level", "entropy_groups", "fiber_level", "group_mean"]
