"""Rollouts through genalign's own decode loop: static KV cache, lean forward, finished rows dropped.

Same distribution as :mod:`genalign.policies.lm.engines.hf` (same filters, same behaviour log-probs; the token streams differ
because finished rows stop consuming random numbers). Why it is faster on small models: one
:class:`~genalign.policies.lm.engines.lean_decoder.LeanDecoder` call per token instead of ``generate``'s per-step machinery, a cache
allocated once, and finished rows removed from the batch when at least a quarter of it has finished.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from genalign.policies.lm.engines.base import Generation, SamplingParams, StopStringMatcher, finalize_completions
from genalign.policies.lm.engines.lean_decoder import LeanDecoder
from genalign.policies.lm.engines.sampling import sample_next_token

#: Drop finished rows once the active batch has shrunk to this fraction of the rows held in the cache.
COMPACT_BELOW = 0.75


class StaticCacheEngine:
    """Samples Llama-family models (Llama, Qwen2) with a preallocated cache.

    Args:
        model: the ``*ForCausalLM`` module, or a peft model around it.
        tokenizer: used for stop strings only.
    """

    def __init__(self, model: nn.Module, tokenizer) -> None:
        self.decoder = LeanDecoder(model)
        self.tokenizer = tokenizer

    @torch.no_grad()
    def generate(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        params: SamplingParams,
        generator: torch.Generator,
        *,
        draws: Tensor | None = None,
    ) -> Generation:
        """Sample one completion per row; ``draws`` ``[B, max_new_tokens]`` (optional) are the uniforms each row
        consumes at each step instead of ``generator``'s (replays a recorded rollout, e.g. one leaf of a tree rollout
        of :mod:`genalign.policies.lm.engines.tree`)."""
        batch, prompt_width = prompt_ids.shape
        device = prompt_ids.device
        dtype = self.decoder.lm_head.weight.dtype
        matcher = StopStringMatcher(self.tokenizer, params.stop)
        eos = torch.tensor(params.eos_token_ids or (-1,), device=device)  # [E]

        raw_ids = torch.full((batch, params.max_new_tokens), params.pad_token_id, dtype=torch.long, device=device)
        raw_logp = torch.zeros(batch, params.max_new_tokens, dtype=torch.float32, device=device)
        cache = self.decoder.allocate(batch, prompt_width + params.max_new_tokens, device, dtype)

        mask = prompt_mask.bool()  # [B, P]
        positions = (mask.long().cumsum(dim=1) - 1).clamp(min=0)  # [B, P]
        logits = self.decoder.forward(prompt_ids, positions, mask, cache, start=0)  # [B, V]
        next_position = positions[:, -1] + 1  # [B]
        rows = torch.arange(batch, device=device)  # [B'] original index of each cache row
        done = torch.zeros(batch, dtype=torch.bool, device=device)  # [B'] finished, still held in the cache

        for step in range(params.max_new_tokens):
            uniforms = draws[rows, step, None] if draws is not None else None  # [B', 1]
            tokens, logp = sample_next_token(logits, params, generator, uniforms)  # [B'], [B']
            live = ~done
            raw_ids[rows[live], step] = tokens[live]
            raw_logp[rows[live], step] = logp[live]
            done = done | torch.isin(tokens, eos)
            if matcher:
                for local in torch.nonzero(~done).flatten().tolist():
                    if matcher.tail_contains_stop(raw_ids[rows[local], : step + 1].tolist()):
                        done[local] = True
            if bool(done.all()) or step + 1 == params.max_new_tokens:
                break
            if (~done).sum() <= COMPACT_BELOW * len(rows):
                keep = torch.nonzero(~done).flatten()  # [B'']
                cache, rows, done = cache.select_rows(keep), rows[keep], done[keep]
                tokens, next_position = tokens[keep], next_position[keep]
            column = prompt_width + step
            logits = self.decoder.forward(
                tokens[:, None],
                next_position[:, None],
                torch.ones_like(tokens[:, None], dtype=torch.bool),
                cache,
                column,
            )
            next_position = next_position + 1
        return finalize_completions(raw_ids, raw_logp, params, matcher)
