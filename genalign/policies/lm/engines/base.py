"""What every rollout engine takes and returns, and the completion bookkeeping they share.

An engine turns a left-padded batch of prompt token ids into sampled completions plus the *behaviour* log-probs of the
sampled tokens at the sampling temperature (``log softmax(logits / T)``, without top-k / top-p truncation, the same
quantity :func:`genalign.policies.lm.logprobs.completion_scores` computes when re-scoring). Engines stop a row at its
first end-of-sequence token or stop string; :func:`finalize_completions` then turns the raw token grid into the masks the
trainer needs, identically for every engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings of one rollout call.

    Attributes:
        max_new_tokens: maximum number of completion tokens per sample.
        temperature: softmax temperature, > 0 (greedy decoding is not a sampling policy and is not offered).
        top_p: nucleus mass in (0, 1]; 1 disables it.
        top_k: keep the k most likely tokens; 0 disables it.
        eos_token_ids: token ids that end a completion (the end token itself is part of the completion).
        pad_token_id: id written after the end of a completion.
        stop: strings that end a completion; the token that completes one is the last action.
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int = 0
    stop: tuple[str, ...] = ()


@dataclass
class Generation:
    """Completions of a batch of ``B`` prompts, ``C`` = longest completion in the batch.

    Attributes:
        completion_ids: ``[B, C]`` long, ``pad_token_id`` after the end of each completion.
        completion_mask: ``[B, C]`` float32, 1 for tokens up to and including the end token / stop-string token.
        logp: ``[B, C]`` float32 behaviour log-probs at the sampling temperature, 0 where the mask is 0.
        truncated: ``[B]`` bool, True when a completion hit ``max_new_tokens`` without an end token or stop string.
    """

    completion_ids: Tensor
    completion_mask: Tensor
    logp: Tensor
    truncated: Tensor


class RolloutEngine(Protocol):
    """A sampler for one causal LM. Engines hold the model by reference, so they always sample the current weights."""

    def generate(
        self, prompt_ids: Tensor, prompt_mask: Tensor, params: SamplingParams, generator: torch.Generator
    ) -> Generation:
        """Sample one completion per row of ``prompt_ids`` ``[B, P]`` (left-padded, ``prompt_mask`` ``[B, P]``)."""
        ...


class StopStringMatcher:
    """Finds where a completion first contains one of ``stop`` strings, decoding as little as possible.

    Args:
        tokenizer: a Hugging Face tokenizer (only ``decode`` is used).
        stop: the stop strings; an empty tuple matches nothing.
    """

    def __init__(self, tokenizer, stop: tuple[str, ...]) -> None:
        self.tokenizer = tokenizer
        self.stop = tuple(s for s in stop if s)
        # A stop string spans at most len(s) tokens (every token decodes to >= 1 character) plus one partial token.
        self.window = max((len(s) for s in self.stop), default=0) + 1

    def __bool__(self) -> bool:
        return bool(self.stop)

    def contains_stop(self, token_ids: list[int]) -> bool:
        text = self.tokenizer.decode(token_ids, skip_special_tokens=False)
        return any(s in text for s in self.stop)

    def tail_contains_stop(self, token_ids: list[int]) -> bool:
        """Whether the last ``window`` tokens contain a stop string (the per-step check of a decode loop)."""
        return self.contains_stop(token_ids[-self.window :])

    def first_stop_length(self, token_ids: list[int]) -> int | None:
        """Smallest ``k`` such that ``token_ids[:k]`` contains a stop string, or ``None`` (binary search)."""
        if not self.stop or not self.contains_stop(token_ids):
            return None
        low, high = 1, len(token_ids)
        while low < high:
            mid = (low + high) // 2
            if self.contains_stop(token_ids[:mid]):
                high = mid
            else:
                low = mid + 1
        return low

    def cut(self, text: str) -> str:
        """``text`` up to (and without) the first stop string."""
        positions = [text.find(s) for s in self.stop if s in text]
        return text[: min(positions)] if positions else text


def finalize_completions(
    raw_ids: Tensor, raw_logp: Tensor, params: SamplingParams, matcher: StopStringMatcher | None
) -> Generation:
    """Cut each row of ``raw_ids`` ``[B, C]`` after its first end token or stop string and build the masks.

    ``raw_logp`` ``[B, C]`` holds the behaviour log-probs of ``raw_ids``; positions after the end are zeroed.
    """
    batch, width = raw_ids.shape
    is_eos = torch.zeros_like(raw_ids, dtype=torch.bool)  # [B, C]
    for eos in params.eos_token_ids:
        is_eos |= raw_ids == eos
    has_eos = is_eos.any(dim=1)  # [B]
    first_eos = torch.where(has_eos, is_eos.float().argmax(dim=1), torch.full_like(has_eos, width, dtype=torch.long))
    lengths = torch.where(has_eos, first_eos + 1, torch.full_like(first_eos, width))  # [B]
    ended = has_eos.clone()
    if matcher:
        for row in range(batch):
            stop_len = matcher.first_stop_length(raw_ids[row, : int(lengths[row])].tolist())
            if stop_len is not None:
                lengths[row] = stop_len
                ended[row] = True
    positions = torch.arange(width, device=raw_ids.device)  # [C]
    mask = positions[None, :] < lengths[:, None]  # [B, C]
    completion_ids = torch.where(mask, raw_ids, torch.full_like(raw_ids, params.pad_token_id))
    keep = int(lengths.max()) if batch else 0
    return Generation(
        completion_ids=completion_ids[:, :keep].contiguous(),
        completion_mask=mask[:, :keep].float(),
        logp=torch.where(mask, raw_logp.float(), torch.zeros_like(raw_logp, dtype=torch.float32))[
            :, :keep
        ].contiguous(),
        truncated=~ended,
    )
