"""One sampling step shared by the engines that own their decode loop.

The filters follow the usual order and semantics (temperature, then top-k keeping ties, then top-p keeping the smallest
set of most likely tokens whose mass reaches ``top_p``, never fewer than one), so a sample drawn here has the same
distribution as one drawn by Hugging Face ``generate`` with the same settings.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.policies.lm.engines.base import SamplingParams


def filtered_logits(scaled: Tensor, *, top_k: int, top_p: float) -> Tensor:
    """Apply top-k then top-p to temperature-scaled logits ``scaled`` ``[B, V]``; removed tokens get ``-inf``."""
    out = scaled
    if 0 < top_k < out.shape[-1]:
        kth = torch.topk(out, top_k, dim=-1).values[:, -1:]  # [B, 1]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, sorted_index = torch.sort(out, dim=-1, descending=False)  # [B, V]
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)  # [B, V]
        remove_sorted = cumulative <= 1.0 - top_p
        remove_sorted[:, -1] = False  # always keep the most likely token
        remove = remove_sorted.scatter(-1, sorted_index, remove_sorted)  # back to vocabulary order
        out = out.masked_fill(remove, float("-inf"))
    return out


def draw_uniforms(batch: int, generator: torch.Generator, device: torch.device) -> Tensor:
    """``[B, 1]`` float32 uniforms in ``[0, 1)``: the random numbers one sampling step consumes (one per row)."""
    return torch.rand((batch, 1), generator=generator, device=device, dtype=torch.float32)


def sample_from_probs(probs: Tensor, generator: torch.Generator | None, uniforms: Tensor | None = None) -> Tensor:
    """One draw per row of ``probs`` ``[B, V]`` (unnormalised is fine) by inverting the cumulative distribution.

    Exactly the categorical distribution, like ``torch.multinomial``, but one cumulative sum and one binary search per
    row instead of multinomial's CPU path, which costs several times a full softmax at vocabulary 50k. ``uniforms``
    ``[B, 1]`` (from :func:`draw_uniforms`) replaces the draw from ``generator``: a recorded rollout replays exactly.
    """
    cumulative = probs.cumsum(dim=-1)  # [B, V]
    total = cumulative[:, -1:].contiguous()  # [B, 1]
    if uniforms is None:
        uniforms = draw_uniforms(total.shape[0], generator, probs.device)
    target = uniforms.to(probs.dtype) * total  # [B, 1]
    tokens = torch.searchsorted(cumulative, target, right=True)  # [B, 1] first index with cumulative > target
    last_positive = torch.searchsorted(cumulative, total, right=False)  # [B, 1] guards target rounding up to total
    return torch.minimum(tokens, last_positive).squeeze(1)  # [B]


def sample_next_token(
    logits: Tensor, params: SamplingParams, generator: torch.Generator | None, uniforms: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Draw one token per row from ``logits`` ``[B, V]`` (with ``uniforms`` ``[B, 1]`` instead of ``generator``'s
    draw when given).

    Returns:
        tokens ``[B]`` long and their behaviour log-probs ``[B]`` float32 under ``log softmax(logits / T)`` (the
        unfiltered distribution at the sampling temperature, which is what re-scoring computes).
    """
    scaled = logits.float().div_(params.temperature) if logits.dtype != torch.float32 else logits / params.temperature
    if params.top_k > 0 or params.top_p < 1.0:
        log_norm = torch.logsumexp(scaled, dim=-1)  # [B]
        tokens = sample_from_probs(
            filtered_logits(scaled, top_k=params.top_k, top_p=params.top_p).softmax(dim=-1), generator, uniforms
        )
    else:  # one exp pass serves both the sample and the normaliser
        peak = scaled.max(dim=-1, keepdim=True).values  # [B, 1]
        unnormalised = (scaled - peak).exp_()  # [B, V]
        tokens = sample_from_probs(unnormalised, generator, uniforms)  # [B]
        log_norm = peak.squeeze(1) + unnormalised.sum(dim=-1).log()  # [B]
    logp = scaled.gather(1, tokens[:, None]).squeeze(1) - log_norm  # [B]
    return tokens, logp
