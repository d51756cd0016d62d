"""The ratio objective of the GRPO family: a ratio level × a clip form, composed by :func:`policy_loss` (formulas.md §2).

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

The levels live in :mod:`genalign.algorithms.ratio_levels`, the clip forms in :mod:`genalign.algorithms.clip_forms`.
Both families take the step batch (:class:`~genalign.algorithms.batch.StepBatch`)
(entropy, rollout-engine log-probs, sentence ids, group reward std, training progress) as a fixed positional
argument. A config gives each its own keywords (``algorithm.ratio_level: {name: chunk, chunk_boundaries: [...]}``,
``algorithm.clip: {name: ppo, eps_high: 0.28}``); :func:`bind_policy_loss` takes them together and splits them
(:func:`split_objective_hyperparameters`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from genalign.algorithms._validation import check_float_tensor, check_mask, check_shape
from genalign.algorithms._validation import expand_advantages as _expand_advantages
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.clip_forms import CLIP_FORMS, ClippedLogRatio
from genalign.algorithms.kl import kl_k3
from genalign.algorithms.options import HyperparameterError, accepted_hyperparameters
from genalign.algorithms.ratio_levels import RATIO_LEVELS, LevelOutput
from genalign.registry import did_you_mean


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
    """Split ``hp`` (the keywords of a ratio level and a clip form, together) into those of each.

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


@dataclass(frozen=True)
class BoundPolicyLoss:
    """A ratio level and a clip form with their hyper-parameters validated and bound once (config load), called per
    micro-batch without inspecting anything: ``loss(logp, old_logp, advantages, mask, batch) -> (loss [N, T],
    metrics)`` (see :func:`policy_loss` for the arguments)."""

    ratio_level: str
    clip: str
    level_hp: Mapping[str, Any]
    clip_hp: Mapping[str, Any]

    def __call__(
        self, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, batch: StepBatch | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        level_fn, clip_form = RATIO_LEVELS.get(self.ratio_level), CLIP_FORMS.get(self.clip)
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
        batch = _complete_batch(batch, old_logp, mask, valid, dtype)

        log_ratio = torch.where(valid, logp - old_logp, 0.0)  # [N, T]; padding never reaches exp

        def clip_fn(lr: Tensor, adv: Tensor, derived: StepBatch | None = None) -> ClippedLogRatio:
            return clip_form(lr, adv, batch if derived is None else derived, **self.clip_hp)

        out = level_fn(log_ratio, advantages, mask, clip_fn, batch, **self.level_hp)
        loss = torch.where(valid, -out.surrogate, 0.0)  # [N, T]
        return loss, _policy_metrics(out, log_ratio, valid)


def bind_policy_loss(ratio_level: str = "token", clip: str = "ppo", **hp: Any) -> BoundPolicyLoss:
    """Validate ``hp`` against the ratio level and the clip form (unknown names and keywords raise with a
    did-you-mean hint, bad values raise ``ValueError``) and bind them: the objective of the GRPO family, ready to call."""
    level_hp, clip_hp = split_objective_hyperparameters(ratio_level, clip, hp)
    return BoundPolicyLoss(ratio_level, clip, level_hp, clip_hp)


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    ratio_level: str = "token",
    clip: str = "ppo",
    batch: StepBatch | None = None,
    **hp: Any,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-action policy loss for one (micro-)batch; aggregate it with :func:`genalign.algorithms.aggregate`.
    (A training loop binds the options once with :func:`bind_policy_loss`; this validates them on every call.)

    Args:
        logp: ``[N, T]`` log-probs of the stored actions under the current policy (with grad).
        old_logp: ``[N, T]`` log-probs under the behaviour/old policy (treated as constants).
        advantages: ``[N]`` (one per sequence) or ``[N, T]`` (per action, e.g. after credit weights); constants.
        mask: ``[N, T]`` bool or float, 1 where an action is trained. Padding may hold any value (even ``-inf``).
        ratio_level: a name in :data:`RATIO_LEVELS`.
        clip: a name in :data:`CLIP_FORMS`.
        batch: the signals some options read (:class:`~genalign.algorithms.batch.StepBatch`: ``entropy``,
            ``behaviour_logp`` of the rollout engine, ``segment_ids``, ``group_reward_std``, ``progress``);
            ``old_logp`` and ``mask`` are filled here.
        **hp: keyword hyper-parameters of the ratio level and of the clip form (``eps_low``, ``eps_high``, ...); an
            unknown keyword raises :class:`HyperparameterError`.
    Returns:
        ``(loss [N, T], metrics)``: ``loss = −A·exp(ℓ̃)`` on valid actions and 0 on padding, in float32 or wider
        (``logp`` is promoted before the ratio is formed); metrics are detached
        scalars over the valid actions of this batch: ``clip_frac_low``, ``clip_frac_high``, ``clip_frac``,
        ``ratio_mean``, ``ratio_min``, ``ratio_max``, ``approx_kl`` (k3 of KL(π_old‖πθ), token level).
    """
    return bind_policy_loss(ratio_level, clip, **hp)(logp, old_logp, advantages, mask, batch)


def _complete_batch(
    batch: StepBatch | None, old_logp: Tensor, mask: Tensor, valid: Tensor, dtype: torch.dtype
) -> StepBatch:
    """Fill ``old_logp`` and ``mask``; detach every tensor, cast the float signals the ratio options read to ``dtype``
    and zero the per-action ones on padding (no NaN/-inf leaks; ``old_logp`` and ``behaviour_logp`` are both 0 there,
    so padding never looks like an engine mismatch)."""
    batch = StepBatch() if batch is None else batch
    if batch.size is not None and batch.size != mask.shape[0]:
        raise ValueError(f"batch holds {batch.size} samples, but logp has N = {mask.shape[0]}")

    def clean(name: str) -> Tensor | None:
        value = batch.get(name)
        return None if value is None else torch.where(valid, value.detach().to(dtype), 0.0)

    std = batch.get("group_reward_std")
    return batch.with_values(
        entropy=clean("entropy"),
        behaviour_logp=clean("behaviour_logp"),  # 0 on padding, like old_logp: no engine mismatch there
        group_reward_std=None if std is None else std.detach().to(dtype),
        old_logp=torch.where(valid, old_logp, 0.0),
        mask=mask,
    )
