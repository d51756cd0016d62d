"""Policy objectives: a ratio level × a clip form, composed by :func:`policy_loss` (formulas.md §2).

The two choices are independent options, never one string:

* ``ratio_level`` (:data:`RATIO_LEVELS`) says *which* importance ratio is used: per token, per sequence (GSPO [293]),
  per sequence with per-token gradients (GSPO-token [293]), or the geometric mean of per-token clipped ratios
  (GMPO [157]).
* ``clip`` (:data:`CLIP_FORMS`) says how a ratio is bounded: ``ppo`` (separate ``eps_low`` / ``eps_high``,
  clip-higher), ``dual_clip``, ``cispo``, ``sapo`` (soft gate) or ``none`` (plain importance-weighted REINFORCE).

Everything runs on log-ratios. A clip form maps a log-ratio ``ℓ`` ``[N, T]`` and the advantages to an *effective*
log-weight ``ℓ̃`` such that the surrogate to maximise is ``A · exp(ℓ̃)`` per action; clipping a log-ratio is clipping
the ratio (``exp`` is monotone), but a clipped position never evaluates ``exp`` of a huge number, so an exploding
ratio cannot turn a zero gradient into ``inf · 0 = NaN``.

Per-action loss: ``L_{i,t} = −A_{i,t} · exp(ℓ̃_{i,t})`` (0 on padding). Sequence-level ratios put the per-sequence
loss on every action of the sequence, so the aggregation modes keep their meaning: ``seq_mean_token_mean`` gives
``mean_i L_i`` exactly (GSPO), ``token_mean`` weights each sequence by its length.

On-policy identity (``logp == old_logp``, so every ratio is exactly 1): the gradient of every level × clip
combination equals the aggregated ``−A · ∇logp`` (CISPO: ``−sg(clip(ρ))·A·∇logp`` with ``clip(1) = 1``; SAPO: the
gate's slope at ρ = 1 is exactly 1), except for the prefix levels (``prefix_geometric``, ``cumulative``,
``min_prefix``), whose weight of action ``t`` sends gradient to its prefix. The loss *value* equals ``−A`` for every
form but ``sapo``, whose gate is ``2/τ`` at ρ = 1.

More levels and clip forms (the method catalogue) live in :mod:`genalign.algorithms.ratio_levels` and
:mod:`genalign.algorithms.trust_regions`. Both families take an :class:`~genalign.algorithms.context.ObjectiveContext`
(entropy, rollout-engine log-probs, sentence ids, group reward std, training progress) as a fixed positional
argument; ``objective_args`` hold the keywords of the level and of the clip form together
(:func:`split_objective_hyperparameters`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from genalign.algorithms._validation import (
    HyperparameterError,
    accepted_hyperparameters,
    check_float_tensor,
    check_mask,
    check_shape,
)
from genalign.algorithms._validation import expand_advantages as _expand_advantages
from genalign.algorithms.context import ObjectiveContext, check_context
from genalign.algorithms.regularizers import kl_k3
from genalign.registry import Registry, did_you_mean

RatioLevelName = Literal["token", "sequence", "sequence_token", "geometric"]
ClipFormName = Literal["ppo", "dual_clip", "cispo", "sapo", "none"]


@dataclass(frozen=True)
class ClippedLogRatio:
    """Output of a clip form; every field is ``[N, T]``.

    Attributes:
        log_weight: effective log-ratio ``ℓ̃`` (carries the gradient); the surrogate is ``A · exp(ℓ̃)``.
        clipped_low: bool, the ratio was bounded at its lower end.
        clipped_high: bool, the ratio was bounded at its upper end (dual-clip's cap included).
    """

    log_weight: Tensor
    clipped_low: Tensor
    clipped_high: Tensor


#: ``fn(log_ratio [N, T], advantages [N, T], context: ObjectiveContext | None = None, **hp) -> ClippedLogRatio``
ClipForm = Callable[..., ClippedLogRatio]
CLIP_FORMS: Registry[ClipForm] = Registry("clip form")


@dataclass(frozen=True)
class LevelOutput:
    """Output of a ratio level; every field is ``[N, T]``.

    Attributes:
        surrogate: ``A · exp(ℓ̃)`` per action, the objective to maximise (with grad).
        ratio: the level's ratio before clipping (detached, for metrics).
        clipped_low, clipped_high: bool flags from the clip form.
    """

    surrogate: Tensor
    ratio: Tensor
    clipped_low: Tensor
    clipped_high: Tensor


#: ``clip_fn(log_ratio [N, T], advantages [N, T], context=None) -> ClippedLogRatio``: the chosen clip form with its hp
#: and the batch's context bound; a level may pass a derived context (e.g. sentence-averaged entropy).
ClipFn = Callable[..., ClippedLogRatio]

#: ``fn(log_ratio [N, T], advantages [N, T], mask [N, T], clip_fn, context, **hp) -> LevelOutput``
RatioLevel = Callable[..., LevelOutput]
RATIO_LEVELS: Registry[RatioLevel] = Registry("ratio level")


# ---------------------------------------------------------------------------------------------------------- clip forms
def _log_bounds(eps_low: float | None, eps_high: float | None) -> tuple[float | None, float | None]:
    if eps_low is not None and not 0 <= eps_low < 1:
        raise ValueError(f"eps_low must be in [0, 1) (the ratio is clipped at 1 - eps_low > 0), got {eps_low!r}")
    if eps_high is not None and not eps_high >= 0:
        raise ValueError(f"eps_high must be >= 0, got {eps_high!r}")
    low = None if eps_low is None else math.log1p(-eps_low)
    high = None if eps_high is None else math.log1p(eps_high)
    return low, high


@CLIP_FORMS.register(
    "ppo",
    formula="L = −min(ρA, clip(ρ, 1−ε_low, 1+ε_high)·A); clip-higher when ε_high > ε_low",
    source="formulas.md §2 (PPO/GRPO; DAPO clip-higher)",
    summary="PPO clipped surrogate with separate lower and upper clip ranges.",
)
def ppo_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    context: ObjectiveContext | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> ClippedLogRatio:
    """PPO clip in log space: for ``A > 0`` the ratio is capped at ``1 + eps_high``, for ``A < 0`` floored at
    ``1 - eps_low``; the clipped side carries no gradient (formulas.md §2; DAPO clip-higher uses 0.2 / 0.28).

    Args:
        log_ratio: ``[N, T]`` ``ℓ = logπθ − logπold`` at the chosen level.
        advantages: ``[N, T]``.
        eps_low: lower clip range, in ``[0, 1)``.
        eps_high: upper clip range, ``>= 0``.
    """
    low, high = _log_bounds(eps_low, eps_high)
    clipped_high = (advantages > 0) & (log_ratio > high)  # [N, T]
    clipped_low = (advantages < 0) & (log_ratio < low)  # [N, T]
    log_weight = torch.where(clipped_high, high, torch.where(clipped_low, low, log_ratio))  # [N, T]
    return ClippedLogRatio(log_weight, clipped_low, clipped_high)


@CLIP_FORMS.register(
    "dual_clip",
    formula="A ≥ 0: PPO; A < 0: L = min(max(−ρA, −clip(ρ)A), −c·A)",
    source="formulas.md §2 (dual-clip PPO)",
    summary="PPO plus a cap c on the ratio of negative-advantage actions.",
)
def dual_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    context: ObjectiveContext | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip_c: float = 3.0,
) -> ClippedLogRatio:
    """Dual-clip PPO: as ``ppo``, and for ``A < 0`` the ratio is also capped at ``c`` so that one very unlikely
    negative action cannot dominate (formulas.md §2, ``c ≈ 3``).

    Args:
        log_ratio: ``[N, T]``.
        advantages: ``[N, T]``.
        eps_low: lower clip range, in ``[0, 1)``.
        eps_high: upper clip range, ``>= 0``.
        dual_clip_c: cap ``c > 1`` on the ratio of negative-advantage actions (typically 3).
    """
    if not dual_clip_c > 1:
        raise ValueError(f"dual_clip_c must be > 1 (it caps ratios above 1 for A < 0), got {dual_clip_c!r}")
    ppo = ppo_clip(log_ratio, advantages, eps_low=eps_low, eps_high=eps_high)
    capped = (advantages < 0) & (log_ratio > math.log(dual_clip_c))  # [N, T]
    log_weight = torch.where(capped, math.log(dual_clip_c), ppo.log_weight)  # [N, T]
    return ClippedLogRatio(log_weight, ppo.clipped_low, ppo.clipped_high | capped)


@CLIP_FORMS.register(
    "cispo",
    formula="L = −sg(clip(ρ, 1−ε_low, 1+ε_high)) · A · logπθ (gradient never zeroed)",
    source="formulas.md §2 (CISPO)",
    summary="Clipped, stop-gradient importance weight on a REINFORCE term; every action keeps its gradient.",
)
def cispo(
    log_ratio: Tensor,
    advantages: Tensor,
    context: ObjectiveContext | None = None,
    *,
    eps_low: float | None = None,
    eps_high: float = 0.28,
) -> ClippedLogRatio:
    """CISPO: the importance weight is clipped and detached, the gradient flows through ``logπθ`` for every action.

    Implemented as ``ℓ̃ = ℓ + sg(clip(ℓ) − ℓ)``: value ``clip(ρ)``, gradient ``clip(ρ)·∇logπθ``, which is the gradient
    of ``sg(clip(ρ)) · A · logπθ`` (formulas.md §2). Clipping applies whatever the sign of ``A``.

    Args:
        log_ratio: ``[N, T]``.
        advantages: ``[N, T]`` (only used for the shape check).
        eps_low: lower clip range in ``[0, 1)``, or ``None`` for no lower bound (the usual choice).
        eps_high: upper clip range, ``>= 0`` (genalign default 0.28; tune per recipe).
    """
    low, high = _log_bounds(eps_low, eps_high)
    clamped = log_ratio.clamp(min=low, max=high)  # [N, T]
    log_weight = log_ratio + (clamped - log_ratio).detach()  # [N, T]
    clipped_low = log_ratio < low if low is not None else torch.zeros_like(log_ratio, dtype=torch.bool)
    return ClippedLogRatio(log_weight, clipped_low, log_ratio > high)


@CLIP_FORMS.register(
    "sapo",
    formula="L = −A · f(ρ), f(ρ) = σ(τ(ρ−1))·4/τ, τ = τ_pos if A > 0 else τ_neg",
    source="[235] SAPO",
    summary="Smooth temperature-controlled gate instead of a hard clip; slope 1 at ρ = 1.",
)
def sapo(
    log_ratio: Tensor,
    advantages: Tensor,
    context: ObjectiveContext | None = None,
    *,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> ClippedLogRatio:
    """SAPO soft gate [235]: ``f(ρ) = σ(τ(ρ − 1)) · 4/τ`` replaces the clipped ratio; its slope ``4σ(1−σ)`` is 1 at
    ``ρ = 1`` and decays smoothly off-policy, so only the offending actions are down-weighted.

    The log-ratio is clamped to ``[−20, 20]`` before ``exp`` (the gate is flat there, so the gradient is ~0 anyway).
    No hard clip happens: ``clipped_low`` / ``clipped_high`` are all False.

    Args:
        log_ratio: ``[N, T]``.
        advantages: ``[N, T]``; their sign picks the temperature.
        tau_pos: temperature for ``A > 0`` (> 0).
        tau_neg: temperature for ``A <= 0`` (> 0).
    """
    if not (tau_pos > 0 and tau_neg > 0):
        raise ValueError(f"tau_pos and tau_neg must be > 0, got tau_pos={tau_pos!r}, tau_neg={tau_neg!r}")
    tau = torch.where(advantages > 0, tau_pos, tau_neg).to(log_ratio.dtype)  # [N, T]
    ratio = log_ratio.clamp(-20.0, 20.0).exp()  # [N, T]
    log_weight = F.logsigmoid(tau * (ratio - 1.0)) + torch.log(4.0 / tau)  # [N, T] = log f(ρ)
    never = torch.zeros_like(log_ratio, dtype=torch.bool)
    return ClippedLogRatio(log_weight, never, never)


@CLIP_FORMS.register(
    "none",
    formula="L = −ρ·A (no clipping; plain REINFORCE on-policy)",
    source="formulas.md §2; [3]",
    summary="Unclipped importance-weighted policy gradient (REINFORCE when on-policy).",
)
def no_clip(log_ratio: Tensor, advantages: Tensor, context: ObjectiveContext | None = None) -> ClippedLogRatio:
    """No clipping: ``ℓ̃ = ℓ``; on-policy this is plain REINFORCE ``−A·∇logπθ`` ([3], formulas.md §2)."""
    never = torch.zeros_like(log_ratio, dtype=torch.bool)
    return ClippedLogRatio(log_ratio, never, never)


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
def token_level(
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip_fn: ClipFn, context: ObjectiveContext
) -> LevelOutput:
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
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip_fn: ClipFn, context: ObjectiveContext
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
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip_fn: ClipFn, context: ObjectiveContext
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
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip_fn: ClipFn, context: ObjectiveContext
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


# ------------------------------------------------------------------------------------------------------- policy loss
def _masked_mean(values: Tensor, valid: Tensor) -> Tensor:
    count = valid.sum()
    return torch.where(count > 0, torch.where(valid, values, 0.0).sum() / count.clamp_min(1), torch.nan)


def _policy_metrics(out: LevelOutput, log_ratio: Tensor, valid: Tensor) -> dict[str, Tensor]:
    with torch.no_grad():
        ratio = out.ratio.to(log_ratio.dtype)
        none = ~valid.any()
        values = {
            "clip_frac_low": _masked_mean(out.clipped_low.to(ratio.dtype), valid),
            "clip_frac_high": _masked_mean(out.clipped_high.to(ratio.dtype), valid),
            "clip_frac": _masked_mean((out.clipped_low | out.clipped_high).to(ratio.dtype), valid),
            "ratio_mean": _masked_mean(ratio, valid),
            "ratio_min": torch.where(none, torch.nan, ratio.masked_fill(~valid, torch.inf).min()),
            "ratio_max": torch.where(none, torch.nan, ratio.masked_fill(~valid, -torch.inf).max()),
            # KL(π_old ‖ πθ) from samples of π_old: k3 with δ = logπθ − logπold
            "approx_kl": _masked_mean(kl_k3(torch.zeros_like(log_ratio), log_ratio.detach()), valid),
        }
    return values


def split_objective_hyperparameters(
    ratio_level: str, clip: str, hp: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``hp`` (a config's ``objective_args``) into the keywords of the ratio level and of the clip form.

    Raises ``UnknownOptionError`` for an unknown name and :class:`HyperparameterError` for a keyword that neither
    option takes (with a did-you-mean hint).
    """
    level_keys = accepted_hyperparameters(RATIO_LEVELS, ratio_level)
    clip_keys = accepted_hyperparameters(CLIP_FORMS, clip)
    shared = set(level_keys) & set(clip_keys)
    assert not shared, f"ratio level {ratio_level!r} and clip form {clip!r} share keywords {sorted(shared)}"
    unknown = [key for key in hp if key not in level_keys and key not in clip_keys]
    if unknown:
        accepted = [*level_keys, *clip_keys]
        hints = "".join(did_you_mean(key, accepted) for key in unknown)
        raise HyperparameterError(
            f"ratio level {ratio_level!r} with clip form {clip!r} got unknown hyper-parameter(s) "
            f"{', '.join(map(repr, unknown))}.{hints} Accepted keywords: {', '.join(accepted) or 'none'}."
        )
    level_hp = {key: value for key, value in hp.items() if key in level_keys}
    clip_hp = {key: value for key, value in hp.items() if key in clip_keys}
    return level_hp, clip_hp


def check_objective_hyperparameters(ratio_level: str, clip: str, hp: Mapping[str, Any]) -> None:
    """Validate an objective choice early (config load): both names exist and every keyword of ``hp`` belongs to the
    ratio level or the clip form. Raises ``UnknownOptionError`` or :class:`HyperparameterError`."""
    split_objective_hyperparameters(ratio_level, clip, hp)


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    ratio_level: RatioLevelName | str = "token",
    clip: ClipFormName | str = "ppo",
    context: ObjectiveContext | None = None,
    **hp: Any,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-action policy loss for one (micro-)batch; aggregate it with :func:`genalign.algorithms.aggregate`.

    Args:
        logp: ``[N, T]`` log-probs of the stored actions under the current policy (with grad).
        old_logp: ``[N, T]`` log-probs under the behaviour/old policy (treated as constants).
        advantages: ``[N]`` (one per sequence) or ``[N, T]`` (per action, e.g. after credit weights); constants.
        mask: ``[N, T]`` bool or float, 1 where an action is trained. Padding may hold any value (even ``-inf``).
        ratio_level: a name in :data:`RATIO_LEVELS`.
        clip: a name in :data:`CLIP_FORMS`.
        context: extra per-action inputs some options need (:class:`ObjectiveContext`: entropy, rollout-engine
            log-probs, sentence ids, group reward std, training progress); ``old_logp`` and ``mask`` are filled here.
        **hp: keyword hyper-parameters of the ratio level and of the clip form (``eps_low``, ``eps_high``, ...); an
            unknown keyword raises :class:`HyperparameterError`.
    Returns:
        ``(loss [N, T], metrics)``: ``loss = −A·exp(ℓ̃)`` on valid actions and 0 on padding, in float32 or wider
        (``logp`` is promoted before the ratio is formed); metrics are detached
        scalars over the valid actions of this batch: ``clip_frac_low``, ``clip_frac_high``, ``clip_frac``,
        ``ratio_mean``, ``ratio_min``, ``ratio_max``, ``approx_kl`` (k3 of KL(π_old‖πθ), token level).
    """
    level_hp, clip_hp = split_objective_hyperparameters(ratio_level, clip, hp)
    level_fn, clip_form = RATIO_LEVELS.get(ratio_level), CLIP_FORMS.get(clip)
    logp = check_float_tensor(logp, "logp", "[N, T]")
    if logp.ndim != 2:
        raise ValueError(f"logp must have shape [N, T], got {list(logp.shape)}")
    shape = tuple(logp.shape)
    old_logp = check_shape(old_logp, "old_logp", shape, "[N, T]").detach()
    dtype = torch.promote_types(logp.dtype, torch.float32)  # ratios of bf16 log-probs are computed in float32
    logp, old_logp = logp.to(dtype), old_logp.to(dtype)
    advantages = _expand_advantages(advantages, shape).detach().to(dtype)  # [N, T]
    mask = check_mask(mask, shape, dtype)  # [N, T]
    valid = mask > 0  # [N, T]
    context = _complete_context(check_context(context, shape), old_logp, mask, valid, dtype)

    log_ratio = torch.where(valid, logp - old_logp, 0.0)  # [N, T]; padding never reaches exp

    def clip_fn(lr: Tensor, adv: Tensor, ctx: ObjectiveContext | None = None) -> ClippedLogRatio:
        return clip_form(lr, adv, context if ctx is None else ctx, **clip_hp)

    out = level_fn(log_ratio, advantages, mask, clip_fn, context, **level_hp)
    loss = torch.where(valid, -out.surrogate, 0.0)  # [N, T]
    return loss, _policy_metrics(out, log_ratio, valid)


def _complete_context(
    context: ObjectiveContext, old_logp: Tensor, mask: Tensor, valid: Tensor, dtype: torch.dtype
) -> ObjectiveContext:
    """Fill ``old_logp`` and ``mask``; cast float fields to ``dtype`` and zero them on padding (no NaN/-inf leaks;
    ``old_logp`` and ``rollout_logp`` are both 0 there, so padding never looks like an engine mismatch)."""

    def clean(value: Tensor | None) -> Tensor | None:
        return None if value is None else torch.where(valid, value.to(dtype), 0.0)

    return replace(
        context,
        entropy=clean(context.entropy),
        rollout_logp=clean(context.rollout_logp),  # 0 on padding, like old_logp: no engine mismatch there
        group_reward_std=None if context.group_reward_std is None else context.group_reward_std.to(dtype),
        old_logp=torch.where(valid, old_logp, 0.0),
        mask=mask,
    )
