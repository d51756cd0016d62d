"""Rollouts through genalign's own decode loop: static KV cache, lean forward, finished rows dropped.

Same distribution as :mod:`genalign.policies.lm.engines.hf` (same filters, same behaviour log-probs; the token streams differ
because finished rows stop consuming random numbers). Why it is faster on small models: one
:class:`~genalign.policies.lm.engines.lean_decoder.LeanDecoder` call per token instead of ``generate``'s per-step machinery, a cache
allocated once, and finished rows removed from the batch when at least a quarter of it has finished.

The decode loop (:func:`decode`) is shared with the multi-turn engine (:mod:`genalign.policies.lm.engines.turn_cache`),
which starts it from a cache kept across turns and keeps the rows it drops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from genalign.policies.lm.engines.base import Generation, SamplingParams, StopStringMatcher, finalize_completions
from genalign.policies.lm.engines.lean_decoder import LeanDecoder, StaticKVCache
from genalign.policies.lm.engines.sampling import sample_next_token

#: Drop finished rows once the active batch has shrunk to this fraction of the rows held in the cache.
COMPACT_BELOW = 0.75


@dataclass
class Decoded:
    """What :func:`decode` returns for ``B`` rows (``W`` = ``max_new_tokens``).

    Attributes:
        generation: the completions (:func:`~genalign.policies.lm.engines.base.finalize_completions`).
        raw_ids: ``[B, W]`` long, every sampled token before the cut at the end token (``pad_token_id`` after a
            row's last step).
        fed: ``[B]`` long, how many of each row's sampled tokens were written into the cache (its first ``fed``).
        rows: the cache rows of every batch row when ``keep_rows``: ``(batch rows [b], their cache [.., b, ..])``
            pairs, each batch row in exactly one; empty otherwise.
    """

    generation: Generation
    raw_ids: Tensor
    fed: Tensor
    rows: list[tuple[Tensor, StaticKVCache]] = field(default_factory=list)


def decode(
    decoder: LeanDecoder,
    matcher: StopStringMatcher,
    cache: StaticKVCache,
    logits: Tensor,
    next_position: Tensor,
    column: int,
    params: SamplingParams,
    generator: torch.Generator | None,
    *,
    draws: Tensor | None = None,
    keep_rows: bool = False,
) -> Decoded:
    """Sample up to ``params.max_new_tokens`` tokens per row, feeding each sampled token back through ``decoder``.

    Args:
        cache: ``[layers, B, kv_heads, capacity, head_dim]`` holding every row's context; ``capacity`` must be at least
            ``column + max_new_tokens - 1``.
        logits: ``[B, V]`` next-token logits after each row's context.
        next_position: ``[B]`` rotary position of each row's first sampled token.
        column: the first cache column free in every row.
        draws: ``[B, max_new_tokens]`` uniforms each row consumes at each step instead of ``generator``'s (replays a
            recorded rollout).
        keep_rows: keep the cache rows of finished samples when the batch is compacted (a multi-turn rollout continues
            them); otherwise they are dropped.

    A finished row is fed no more tokens (its later cache columns stay masked), and once the unfinished rows are at
    most :data:`COMPACT_BELOW` of the rows held, the finished ones leave the batch: random numbers are drawn for the
    rows held, so a replay must compact identically.
    """
    batch, width, device = logits.shape[0], params.max_new_tokens, logits.device
    eos = torch.tensor(params.eos_token_ids or (-1,), device=device)  # [E]
    raw_ids = torch.full((batch, width), params.pad_token_id, dtype=torch.long, device=device)  # [B, W]
    raw_logp = torch.zeros(batch, width, dtype=torch.float32, device=device)  # [B, W]
    fed = torch.zeros(batch, dtype=torch.long, device=device)  # [B]
    rows = torch.arange(batch, device=device)  # [B'] batch row of each cache row
    done = torch.zeros(batch, dtype=torch.bool, device=device)  # [B'] finished, still held in the cache
    dropped: list[tuple[Tensor, StaticKVCache]] = []
    for step in range(width):
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
        if bool(done.all()) or step + 1 == width:
            break
        if (~done).sum() <= COMPACT_BELOW * len(rows):
            keep, gone = torch.nonzero(~done).flatten(), torch.nonzero(done).flatten()  # [B''], [B' - B'']
            if keep_rows:
                dropped.append((rows[gone], cache.select_rows(gone)))
            cache, rows, done = cache.select_rows(keep), rows[keep], done[keep]
            tokens, next_position = tokens[keep], next_position[keep]
        fed[rows[~done]] += 1
        logits = decoder.forward(tokens[:, None], next_position[:, None], ~done[:, None], cache, column + step)
        next_position = next_position + 1
    generation = finalize_completions(raw_ids, raw_logp, params, matcher)
    return Decoded(generation, raw_ids, fed, [*dropped, (rows, cache)] if keep_rows else [])


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
        dtype = self.decoder.lm_head.weight.dtype
        cache = self.decoder.allocate(batch, prompt_width + params.max_new_tokens, prompt_ids.device, dtype)
        mask = prompt_mask.bool()  # [B, P]
        positions = (mask.long().cumsum(dim=1) - 1).clamp(min=0)  # [B, P]
        logits = self.decoder.forward(prompt_ids, positions, mask, cache, start=0)  # [B, V]
        matcher = StopStringMatcher(self.tokenizer, params.stop)
        decoded = decode(
            self.decoder, matcher, cache, logits, positions[:, -1] + 1, prompt_width, params, generator, draws=draws
        )
        return decoded.generation
