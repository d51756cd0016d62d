"""The ratio-level registry: *which* importance ratio the objective uses (formulas.md §2).

One signature::

    fn(log_ratio [N, T], advantages [N, T], mask [N, T], clip_fn, batch, **hp) -> LevelOutput

``log_ratio`` ``ℓ = logπθ − logπold`` is 0 on padding; the surrogate to maximise is ``A · exp(ℓ̃)`` per action.
``clip_fn`` is the chosen clip form with its hyper-parameters bound (:mod:`genalign.algorithms.clip_forms`); a level may
pass it a derived batch (:class:`~genalign.algorithms.batch.StepBatch`). "Position" ``t`` counts the valid actions of a sequence (1-based), so left padding or holes in
the mask do not shift it. Sequence-level ratios put the per-sequence loss on every action of the sequence, so the
aggregation modes keep their meaning."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.clip_forms.base import ClippedLogRatio
from genalign.registry import Registry


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


#: ``clip_fn(log_ratio [N, T], advantages [N, T], batch=None) -> ClippedLogRatio``: the chosen clip form with its hp
#: and the step batch bound; a level may pass a derived batch (e.g. sentence-averaged entropy).
ClipFn = Callable[..., ClippedLogRatio]


#: ``fn(log_ratio [N, T], advantages [N, T], mask [N, T], clip_fn, batch, **hp) -> LevelOutput``
RatioLevel = Callable[..., LevelOutput]


RATIO_LEVELS: Registry[RatioLevel] = Registry("ratio level", catalogue="genalign.experimental.ratio_levels")


def action_positions(mask: Tensor) -> Tensor:
    """``[N, T]`` 1-based index of each action among the valid actions of its row (padding: the last count, >= 1)."""
    return torch.cumsum(mask, 1).clamp_min(1.0)


def row_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Masked mean over ``T``: ``[N, T] -> [N, 1]``."""
    return ((values * mask).sum(1) / mask.sum(1).clamp_min(1.0))[:, None]


def level_output(advantages: Tensor, log_weight: Tensor, ratio_log: Tensor, clipped) -> LevelOutput:
    return LevelOutput(
        surrogate=advantages * log_weight.exp(),  # [N, T]
        ratio=ratio_log.detach().exp(),
        clipped_low=clipped.clipped_low,
        clipped_high=clipped.clipped_high,
    )


# ----------------------------------------------------------------------------------------------------------- sentence
def segment_ids_of(mask: Tensor, batch: StepBatch, segment_length: int) -> Tensor:
    """``[N, T]`` long: the batch's ``segment_ids`` or consecutive windows of ``segment_length`` valid actions."""
    if batch.get("segment_ids") is not None:
        return batch["segment_ids"].to(torch.long)
    return ((action_positions(mask) - 1.0) // segment_length).to(torch.long)  # [N, T]


def segment_mean(values: Tensor, mask: Tensor, segments: Tensor) -> Tensor:
    """Masked mean of ``values`` over each (row, segment), broadcast back to ``[N, T]``."""
    n, t = values.shape
    starts = torch.cat([torch.zeros_like(segments[:, :1]), (segments.diff(dim=1) != 0).long()], 1)  # [N, T]
    offset = torch.cumsum(starts, 1)  # [N, T] sentences renumbered 0 .. T-1 per row
    key = (torch.arange(n, device=values.device)[:, None] * t + offset).flatten()  # [N*T]
    sums = values.new_zeros(n * t).index_add_(0, key, (values * mask).flatten())  # [N*T]
    counts = values.new_zeros(n * t).index_add_(0, key, mask.flatten())  # [N*T]
    return (sums / counts.clamp_min(1.0))[key].view(n, t)  # [N, T]
