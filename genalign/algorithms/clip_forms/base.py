"""The clip-form registry: how an importance ratio is bounded (formulas.md §2).

A clip form maps a log-ratio ``ℓ`` ``[N, T]`` and the advantages to an *effective* log-weight ``ℓ̃`` such that the
surrogate to maximise is ``A · exp(ℓ̃)`` per action, with one signature::

    fn(log_ratio [N, T], advantages [N, T], batch: StepBatch | None = None, **hp) -> ClippedLogRatio

Clipping a log-ratio is clipping the ratio (``exp`` is monotone), but a clipped position never evaluates ``exp`` of a
huge number, so an exploding ratio cannot turn a zero gradient into ``inf · 0 = NaN``. A position whose ``ℓ̃`` is a
constant (detached) carries no gradient. Bounds named ``eps_*`` are ratio offsets, as in PPO. Every clip form composes
with every ratio level (:mod:`genalign.algorithms.ratio_levels`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.registry import Registry


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


#: ``fn(log_ratio [N, T], advantages [N, T], batch: StepBatch | None = None, **hp) -> ClippedLogRatio``
ClipForm = Callable[..., ClippedLogRatio]


CLIP_FORMS: Registry[ClipForm] = Registry("clip form", catalogue="genalign.experimental.clip_forms")


# ---------------------------------------------------------------------------------------------------------- clip forms
def log_bounds(eps_low: float | None, eps_high: float | None) -> tuple[float | None, float | None]:
    if eps_low is not None and not 0 <= eps_low < 1:
        raise ValueError(f"eps_low must be in [0, 1) (the ratio is clipped at 1 - eps_low > 0), got {eps_low!r}")
    if eps_high is not None and not eps_high >= 0:
        raise ValueError(f"eps_high must be >= 0, got {eps_high!r}")
    low = None if eps_low is None else math.log1p(-eps_low)
    high = None if eps_high is None else math.log1p(eps_high)
    return low, high


def check_eps(eps_low: float, eps_high: float) -> None:
    log_bounds(eps_low, eps_high)


def ppo_with_bounds(log_ratio: Tensor, advantages: Tensor, low: Tensor, high: Tensor) -> ClippedLogRatio:
    """PPO's sign-aware clip with per-action log-space bounds ``low`` / ``high`` ``[N, T]`` (constants).

    ``A > 0``: ``ℓ`` capped at ``high``; ``A < 0``: floored at ``low``; the clipped side carries no gradient.
    """
    clipped_high = (advantages > 0) & (log_ratio > high)  # [N, T]
    clipped_low = (advantages < 0) & (log_ratio < low)  # [N, T]
    log_weight = torch.where(clipped_high, high, torch.where(clipped_low, low, log_ratio))  # [N, T]
    return ClippedLogRatio(log_weight, clipped_low, clipped_high)


def log_bounds_tensor(eps_low: Tensor, eps_high: Tensor) -> tuple[Tensor, Tensor]:
    """Per-action ratio offsets ``[N, T]`` -> log-space bounds ``(log(1 − ε_low), log(1 + ε_high))``."""
    return torch.log1p(-eps_low), torch.log1p(eps_high)


def row_mean(values: Tensor, mask: Tensor) -> Tensor:
    return ((values * mask).sum(1) / mask.sum(1).clamp_min(1.0))[:, None]  # [N, 1]


def mask_of(batch: StepBatch | None, like: Tensor) -> Tensor:
    return torch.ones_like(like) if batch is None or batch.get("mask") is None else batch["mask"]
