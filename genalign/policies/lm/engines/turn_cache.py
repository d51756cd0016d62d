"""Multi-turn rollouts in the static KV-cache engine with each conversation's cache kept between its turns.

A multi-turn rollout (:mod:`genalign.policies.lm.multi_turn`) samples a turn for every active conversation, appends the
environment's answer as a suffix, and samples the next turn. Re-encoding the whole conversation for every turn costs a
prefill of its full history; here a turn costs its new tokens only:

1. **Keep.** After a turn, every row's cache (its context and the turn's tokens fed back while decoding) is held in
   :class:`TurnCaches`, with the token ids it encodes. Rows that finished early in the turn were moved out of the
   decode batch by :func:`~genalign.policies.lm.engines.static.decode` (``keep_rows``): they are held from there.
2. **Continue.** The next call names the conversations that are still active and their full contexts. Each one's
   cache keeps the longest prefix of its held ids that its context starts with (the whole held cache when the context
   extends it, as a multi-turn rollout's always does, every token but the last when the context holds nothing new),
   and only the rest is encoded: the last token of the previous turn (sampled, never fed) and the environment's answer.
   Conversations that are no longer named are dropped, so the cache holds active rows only.
3. **Lay out.** When the held cache holds exactly the active rows, in order, and has room, the turn continues it in
   place: the new tokens of every row are right-aligned in one left-padded chunk written after its last used column.
   Otherwise (rows have left, rows finished early were moved out, the room is spent, or more than
   :data:`MAX_PADDING` of the columns are padding) the kept columns of every active row are copied into a new cache,
   right-aligned to a shared column (keys carry their rotary positions, so a column's index only orders it), with room
   for this turn and a next one in place; the chunk follows. The chunk is prefilled in one forward and the turn is
   decoded from there. Padding columns stay masked; a row's rotary positions continue its own context, exactly as a
   left-padded re-encoding of the whole conversation numbers them.

Exactness: the rows of a call are those a re-encoding call would get, in the same order, and the decode loop is the
same, so both draw the same random numbers for the same rows. The logits differ only by float rounding (the same
context is computed in chunks of a different split: prompt, decoded tokens, answers, instead of one prefill), so the
sampled tokens are the same unless a uniform falls within that rounding of a boundary of the cumulative distribution,
and the behaviour log-probs agree to ~1e-6 in float32 (tests/policies/lm/engines/test_turn_cache.py).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from genalign.policies.lm.engines.base import Generation, SamplingParams, StopStringMatcher
from genalign.policies.lm.engines.lean_decoder import LeanDecoder, StaticKVCache, layer_windows, unsupported_reason
from genalign.policies.lm.engines.static import decode

#: A new layout of the held caches leaves room for this many later turns to continue it in place.
TURNS_AHEAD = 2

#: A held cache is continued in place while at most this fraction of its used columns are padding for its longest row
#: (padding columns are attended over, masked); beyond it, or when rows have left, the next turn lays it out anew.
MAX_PADDING = 0.25


def common_prefix(held: Sequence[int], context: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences."""
    if len(held) <= len(context) and list(context[: len(held)]) == list(held):
        return len(held)
    size = 0
    for a, b in zip(held, context):
        if a != b:
            break
        size += 1
    return size


@dataclass
class TurnCaches:
    """The caches of one rollout's conversations between their turns.

    Attributes:
        pieces: ``(conversation keys [b], cache [layers, b, kv_heads, capacity, head_dim])`` pairs; every held
            conversation is in one piece, whose row holds its tokens in the columns its ``key_mask`` marks, in order.
        ids: the token ids each held conversation's cache encodes, by key.
    """

    pieces: list[tuple[list[Hashable], StaticKVCache]] = field(default_factory=list)
    ids: dict[Hashable, list[int]] = field(default_factory=dict)
    answer_tokens: int = 0  # the most new tokens a call that continued held caches encoded (an answer and one token)

    def kept_lengths(self, keys: Sequence[Hashable], contexts: Sequence[Sequence[int]]) -> list[int]:
        """How many leading tokens of each context its held cache keeps (at most all but the last token: the turn
        needs the logits after it)."""
        return [
            min(common_prefix(self.ids.get(key, ()), context), len(context) - 1)
            for key, context in zip(keys, contexts, strict=True)
        ]

    def in_place(self, keys: Sequence[Hashable], kept: Sequence[int], columns: int) -> tuple[StaticKVCache, int] | None:
        """The held cache and its first free column, when the next turn can continue it in place: it holds exactly
        ``keys``, in order, in one piece, every row keeps all it holds, ``columns`` more columns fit, and at most
        :data:`MAX_PADDING` of its used columns are padding for the longest row. None otherwise."""
        if len(self.pieces) != 1 or self.pieces[0][0] != list(keys):
            return None
        if any(size != len(self.ids[key]) for key, size in zip(keys, kept, strict=True)):
            return None
        cache = self.pieces[0][1]
        used = torch.nonzero(cache.key_mask.any(dim=0)).flatten()  # [U] columns holding a token of some row
        free = int(used[-1]) + 1 if len(used) else 0
        fits = free + columns <= cache.key_mask.shape[1]
        return (cache, free) if fits and free - max(kept) <= MAX_PADDING * free else None

    def copy_into(self, cache: StaticKVCache, keys: Sequence[Hashable], kept: Sequence[int], end: int) -> None:
        """Write the first ``kept[i]`` cached tokens of conversation ``keys[i]`` into row ``i`` of ``cache``, in
        columns ``[end - kept[i], end)`` (the columns before stay masked)."""
        wanted = {key: (row, size) for row, (key, size) in enumerate(zip(keys, kept, strict=True)) if size > 0}
        for piece_keys, piece in self.pieces:
            hits = [(local, *wanted[key]) for local, key in enumerate(piece_keys) if key in wanted]
            if not hits:
                continue
            local, target, size = (torch.tensor(column, device=cache.keys.device) for column in zip(*hits))  # [b]
            real = piece.key_mask[local]  # [b, capacity] the columns of each source row that hold its tokens
            ordered = torch.sort(real.char(), dim=1, descending=True, stable=True).indices  # [b, capacity] real first
            token = torch.arange(end, device=real.device) - (end - size[:, None])  # [b, end] token index per column
            valid = token >= 0  # [b, end]
            source = ordered.gather(1, token.clamp(min=0))  # [b, end] the column holding each token
            keys_ = piece.keys[:, local[:, None], :, source]  # [b, end, layers, kv_heads, head_dim]
            values = piece.values[:, local[:, None], :, source]
            cache.keys[:, target, :, :end] = keys_.permute(2, 0, 3, 1, 4)
            cache.values[:, target, :, :end] = values.permute(2, 0, 3, 1, 4)
            cache.key_mask[target, :end] = valid

    def fork(self, parents: Sequence[Hashable], children: Sequence[Sequence[Hashable]]) -> None:
        """Hold conversation ``children[i][j]`` as a copy of ``parents[i]``'s cache (a tree rollout branching at a turn
        boundary: the branches share the prefix's keys and values, copied row by row, never encoded again). In each
        piece a parent's copies follow it, so a piece keeps the order of a rollout that lists branches after their
        parent."""
        copies = dict(zip(parents, children, strict=True))
        pieces = []
        for keys, cache in self.pieces:
            rows = [(held, local) for local, key in enumerate(keys) for held in (key, *copies.get(key, ()))]
            if len(rows) == len(keys):
                pieces.append((keys, cache))
                continue
            index = torch.tensor([local for _, local in rows], device=cache.keys.device)  # [b'] source row of each
            pieces.append(([key for key, _ in rows], cache.select_rows(index)))
        self.pieces = pieces
        for parent, copies_of_parent in copies.items():
            for child in copies_of_parent:
                if parent in self.ids:  # a conversation not held yet has nothing to share
                    self.ids[child] = list(self.ids[parent])

    def hold(
        self, keys: Sequence[Hashable], ids: Sequence[list[int]], pieces: list[tuple[Tensor, StaticKVCache]]
    ) -> None:
        """Replace what is held by the caches of ``keys`` after a turn: ``pieces`` are ``(batch rows [b], cache)``
        pairs of :class:`~genalign.policies.lm.engines.static.Decoded`; ``ids[i]`` the tokens row ``i`` encodes."""
        self.pieces = [([keys[row] for row in rows.tolist()], cache) for rows, cache in pieces]
        self.ids = dict(zip(keys, ids, strict=True))


def turn_cache_unsupported_reason(model: nn.Module) -> str | None:
    """Why :class:`TurnCacheEngine` cannot sample ``model`` (``None`` when it can): the lean decoder's own reasons, and
    sliding-window layers (a new layout moves a row's columns, and a window counts columns)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    reason = unsupported_reason(base)
    if reason is None and any(window is not None for window in layer_windows(base.config)):
        reason = "its sliding-window layers attend within a window of cache columns, which a new layout moves"
    return reason


class TurnCacheEngine:
    """Samples the turns of multi-turn rollouts of the lean decoder's architectures (without sliding-window layers),
    keeping each conversation's static KV cache between its turns (module docstring).

    Args:
        model: the ``*ForCausalLM`` module, or a peft model around it.
        tokenizer: used for stop strings only.
    """

    def __init__(self, model: nn.Module, tokenizer) -> None:
        reason = turn_cache_unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"policy.multi_turn.keep_kv_cache cannot keep this model's cache: {reason}.")
        self.decoder = LeanDecoder(model)
        self.tokenizer = tokenizer

    @torch.no_grad()
    def generate(
        self,
        caches: TurnCaches,
        keys: Sequence[Hashable],
        contexts: Sequence[list[int]],
        params: SamplingParams,
        generator: torch.Generator,
    ) -> Generation:
        """Sample the next turn of conversations ``keys`` (stable across calls; those not named are dropped from
        ``caches``) whose token ids so far are ``contexts`` (non-empty); ``caches`` is updated to hold them after
        the turn. Row ``i`` of the result is the turn of ``keys[i]``."""
        if any(not context for context in contexts):
            raise ValueError("every conversation needs at least one token of context")
        weight = self.decoder.lm_head.weight
        device, batch = weight.device, len(keys)
        kept = caches.kept_lengths(keys, contexts)
        new = [context[size:] for context, size in zip(contexts, kept, strict=True)]
        chunk, steps = max(map(len, new)), params.max_new_tokens
        if max(kept) > 0:
            caches.answer_tokens = max(caches.answer_tokens, chunk)
        continued = caches.in_place(keys, kept, chunk + steps)
        if continued is None:  # a new layout: the kept columns of every row right-aligned to `start`
            start = max(kept)
            # room for this turn, and for TURNS_AHEAD next ones in place, each with as many new tokens as the largest
            # answer so far (min(chunk, steps) before any: this chunk is the prompt)
            ahead = (caches.answer_tokens or min(chunk, steps)) + steps
            capacity = start + chunk + steps + TURNS_AHEAD * ahead
            cache = self.decoder.allocate(batch, capacity, device, weight.dtype)
            caches.copy_into(cache, keys, kept, start)
        else:
            cache, start = continued

        ids = torch.full((batch, chunk), params.pad_token_id, dtype=torch.long)  # [B, S] right-aligned
        positions = torch.zeros(batch, chunk, dtype=torch.long)  # [B, S]
        mask = torch.zeros(batch, chunk, dtype=torch.bool)  # [B, S]
        for row, (tokens, size) in enumerate(zip(new, kept, strict=True)):
            ids[row, chunk - len(tokens) :] = torch.tensor(tokens, dtype=torch.long)
            positions[row, chunk - len(tokens) :] = torch.arange(size, size + len(tokens))
            mask[row, chunk - len(tokens) :] = True
        ids, positions, mask = ids.to(device), positions.to(device), mask.to(device)
        logits = self.decoder.forward(ids, positions, mask, cache, start)  # [B, V]
        next_position = torch.tensor([len(context) for context in contexts], device=device)  # [B]

        matcher = StopStringMatcher(self.tokenizer, params.stop)
        decoded = decode(
            self.decoder, matcher, cache, logits, next_position, start + chunk, params, generator, keep_rows=True
        )
        fed = decoded.fed.tolist()
        raw = decoded.raw_ids.tolist()
        held = [list(context) + raw[row][: fed[row]] for row, context in enumerate(contexts)]
        caches.hold(keys, held, decoded.rows)
        return decoded.generation
