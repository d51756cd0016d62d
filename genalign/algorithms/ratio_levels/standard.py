"""The standard ratio levels: per token (PPO / GRPO), per sequence (GSPO [293]), per sequence with per-token gradients
(GSPO-token [293]) and the geometric mean of per-token clipped ratios (GMPO [157])."""

from __future__ import annotations

from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.ratio_levels.base import (
    RATIO_LEVELS,
    ClipFn,
    LevelOutput,
)


# -------------------------------------------------------------------------------------------------------- ratio levels
def _sequence_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Masked mean over the action axis: ``[N, T] -> [N]`` (0 for a sequence without actions)."""
    return (values * mask).sum(1) / mask.sum(1).clamp_min(1.0)  # [N]


@RATIO_LEVELS.register(
    "token",
    formula="ρ_it = exp(logπθ − logπold) per action, clipped per action",
    source="formulas.md §2 (PPO/GRPO)",
    summary="One ratio per action (token, denoising step).",
)
def token_level(log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip_fn: ClipFn, batch: StepBatch) -> LevelOutput:
    """Token-level ratio ``ρ_{i,t}`` with a per-action clip (formulas.md §2). Shapes ``[N, T]``."""
    clipped = clip_fn(log_ratio, advantages)
    return LevelOutput(
        surrogate=advantages * clipped.log_weight.exp(),  # [N, T]
        ratio=log_ratio.detach().exp(),
        clipped_low=clipped.clipped_low,
        clipped_high=clipped.clipped_high,
    )


@RATIO_LEVELS.register(
    "sequence",
    formula="s_i = exp(Σ_t m·(logπθ − logπold) / |o_i|), clipped per sequence, placed on every action of o_i",
    source="[293] GSPO",
    summary="Length-normalised sequence ratio with sequence-level clipping (GSPO).",
)
def sequence_level(
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip_fn: ClipFn, batch: StepBatch
) -> LevelOutput:
    """GSPO [293] sequence ratio ``s_i = exp(mean_t ℓ_{i,t})``, clipped once per sequence (use small eps, ~3e-4).

    The sequence's surrogate ``A·clip(s_i)`` is placed on each of its actions (``[N, T]``), so
    ``seq_mean_token_mean`` aggregation gives GSPO's ``mean_i`` exactly. With one action per sequence this equals the
    token level.
    """
    sequence = _sequence_mean(log_ratio, mask)[:, None].expand_as(log_ratio)  # [N, T]
    clipped = clip_fn(sequence, advantages)
    return LevelOutput(
        surrogate=advantages * clipped.log_weight.exp(),  # [N, T]
        ratio=sequence.detach().exp(),
        clipped_low=clipped.clipped_low,
        clipped_high=clipped.clipped_high,
    )


@RATIO_LEVELS.register(
    "sequence_token",
    formula="s_it = sg[s_i] · πθ(a_t)/sg[πθ(a_t)] (value s_i, gradient per action), clipped like s_i",
    source="[293] GSPO-token",
    summary="GSPO's token form: the sequence ratio's value with per-action gradients (allows per-token advantages).",
)
def sequence_token_level(
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip_fn: ClipFn, batch: StepBatch
) -> LevelOutput:
    """GSPO-token [293]: ``ℓ_{i,t} = sg[mean_t ℓ_i] + ℓ_{i,t} − sg[ℓ_{i,t}]``: the value is the sequence log-ratio,
    the gradient is each action's own ``∇logπθ``. Shapes ``[N, T]``."""
    sequence = _sequence_mean(log_ratio, mask)[:, None].detach()  # [N, 1]
    mixed = sequence + log_ratio - log_ratio.detach()  # [N, T]
    clipped = clip_fn(mixed, advantages)
    return LevelOutput(
        surrogate=advantages * clipped.log_weight.exp(),  # [N, T]
        ratio=mixed.detach().exp(),
        clipped_low=clipped.clipped_low,
        clipped_high=clipped.clipped_high,
    )


@RATIO_LEVELS.register(
    "geometric",
    formula="ρ_i = exp(Σ_t m·clip_A(logρ_it) / |o_i|) (clip in log space, sign-aware), L = −A·ρ_i",
    source="[157] GMPO",
    summary="Geometric mean of per-action clipped ratios (GMPO), less sensitive to outlier ratios.",
)
def geometric_level(
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip_fn: ClipFn, batch: StepBatch
) -> LevelOutput:
    """GMPO [157]: clip each action's log-ratio (sign-aware, with the chosen clip form), then take the geometric mean
    over the sequence: ``ρ_i = exp(mean_t ℓ̃_{i,t})``; the surrogate ``A·ρ_i`` is placed on every action.

    GMPO clips ``logρ`` to ``(−ε, ε)`` (ε ≈ 0.4): with ``clip="ppo"`` pass ``eps_low = 1 − e^{−ε}`` and
    ``eps_high = e^{ε} − 1``. Shapes ``[N, T]``.
    """
    clipped = clip_fn(log_ratio, advantages)
    geometric = _sequence_mean(clipped.log_weight, mask)[:, None]  # [N, 1]
    return LevelOutput(
        surrogate=advantages * geometric.exp(),  # [N, T]
        ratio=_sequence_mean(log_ratio, mask)[:, None].expand_as(log_ratio).detach().exp(),
        clipped_low=clipped.clipped_low,
        clipped_high=clipped.clipped_high,
    )
