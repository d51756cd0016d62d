"""Chunk-level ratios for flow models (Chunk-GRPO [70]) and weighted chunk sampling.

The action axis ``T`` of a flow policy is the denoising steps, so "position" here is the step index itself (not the
count of valid actions as in the token-level levels): chunk ``c`` covers the steps ``[b_c, b_{c+1})``."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.ratio_levels.base import (
    RATIO_LEVELS,
    ClipFn,
    LevelOutput,
)


def chunk_ids(num_steps: int, *, chunk_size: int = 4, chunk_boundaries: list[int] | None = None) -> Tensor:
    """``[T]`` long: the chunk of each step. ``chunk_boundaries`` are the first steps of the chunks (sorted, starting
    at 0, e.g. ``[0, 2, 5, 9]``); without them the chunks are consecutive windows of ``chunk_size`` steps."""
    if chunk_boundaries is None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1 (steps per chunk), got {chunk_size!r}")
        return torch.arange(num_steps) // chunk_size
    if not chunk_boundaries or chunk_boundaries[0] != 0 or chunk_boundaries != sorted(set(chunk_boundaries)):
        raise ValueError(
            f"chunk_boundaries={chunk_boundaries!r} must be sorted distinct first steps of the chunks, starting at 0."
        )
    starts = torch.zeros(num_steps, dtype=torch.long)
    starts[[b for b in chunk_boundaries if b < num_steps]] = 1
    return torch.cumsum(starts, 0) - 1  # [T]


def chunk_mean(values: Tensor, mask: Tensor, chunks: Tensor) -> Tensor:
    """Masked mean of ``values`` ``[N, T]`` over each (row, chunk), broadcast back to ``[N, T]`` (``chunks`` ``[T]``)."""
    num_chunks = int(chunks.max()) + 1
    one_hot = torch.nn.functional.one_hot(chunks.to(values.device), num_chunks).to(values.dtype)  # [T, C]
    sums = (values * mask) @ one_hot  # [N, C]
    counts = mask @ one_hot  # [N, C]
    return (sums / counts.clamp_min(1.0)) @ one_hot.T  # [N, T]


@RATIO_LEVELS.register(
    "chunk",
    formula="r_{i,c} = exp(mean_{t∈chunk c} ℓ_it) = (Π_{t∈c} ρ_it)^{1/|c|}, clipped per chunk, placed on its steps",
    source="[70] Chunk-GRPO",
    summary="One importance ratio per chunk of consecutive denoising steps (flow models).",
)
def chunk_level(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_fn: ClipFn,
    batch: StepBatch,
    *,
    chunk_size: int = 4,
    chunk_boundaries: list[int] | None = None,
) -> LevelOutput:
    """Chunk-GRPO [70]: group consecutive denoising steps into chunks and take one ratio per chunk, the geometric
    mean of the step ratios of its trained steps; the chunk's clipped surrogate is placed on each of its steps, so
    every step of a chunk gets the same clip decision.

    Args:
        log_ratio, advantages, mask: ``[N, T]`` (``T`` = denoising steps; untrained steps have mask 0).
        chunk_size: steps per chunk when ``chunk_boundaries`` is None.
        chunk_boundaries: first step of each chunk (e.g. from the latent-change profile of the sampler).
    """
    chunks = chunk_ids(log_ratio.shape[1], chunk_size=chunk_size, chunk_boundaries=chunk_boundaries)  # [T]
    chunk_log_ratio = chunk_mean(log_ratio, mask, chunks)  # [N, T]
    clipped = clip_fn(chunk_log_ratio, advantages)
    return LevelOutput(
        surrogate=advantages * clipped.log_weight.exp(),  # [N, T]
        ratio=chunk_log_ratio.detach().exp(),
        clipped_low=clipped.clipped_low,
        clipped_high=clipped.clipped_high,
    )


def weighted_chunk_mask(
    chunks: Tensor, weights: list[float], *, num_trained: int, generator: torch.Generator | None = None
) -> Tensor:
    """Chunk-GRPO's optional weighted sampling: draw ``num_trained`` distinct chunks with probability proportional to
    ``weights`` (one per chunk) and return the ``[T]`` bool mask of their steps."""
    num_chunks = int(chunks.max()) + 1
    if len(weights) != num_chunks or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"weights={weights!r} must be {num_chunks} non-negative numbers, not all 0 (one per chunk).")
    if not 1 <= num_trained <= num_chunks:
        raise ValueError(f"num_trained={num_trained} must be in [1, {num_chunks}] (chunks trained per rollout).")
    picked = torch.multinomial(torch.tensor(weights, dtype=torch.float64), num_trained, generator=generator)  # [k]
    return torch.isin(chunks, picked)  # [T]
