"""Sentence / reasoning-step segments of completions (the ``segment_ids`` rollout-structure signal), from token ids alone.

Definition. Token ``v`` is a *boundary token* when its text (``tokenizer.decode([v], skip_special_tokens=True)``)
contains a newline, or contains ``.``, ``!`` or ``?`` followed by whitespace or by the end of the token's text (regular
expression :data:`BOUNDARY`). Segment 0 starts at the first completion token; a new segment starts right after each
boundary token among the real (masked-in) actions, so ``segment_ids[i, t]`` is the number of boundary tokens in
``completion[i, :t]`` (the boundary token itself closes its segment). Padding continues the last segment, so the ids are
non-decreasing along ``T``.

The rule looks at one token at a time: a token ``"."`` ends a segment even inside ``3 . 14`` when the tokenizer splits
the number there, and ``"Mr."`` ends one too; a token ``"3.14"`` does not. Special tokens decode to nothing and are
never boundaries. The boundary flag of every vocabulary entry is decoded once per tokenizer (:class:`SegmentBoundaries`)
and then read with one gather, so segment ids cost nearly nothing per rollout.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

#: Text of a boundary token: a newline, or a sentence end followed by whitespace or the end of the token.
BOUNDARY = re.compile(r"\n|[.!?](?=\s|$)")


class SegmentBoundaries:
    """Segment ids of completions under one tokenizer (see the module docstring); the vocabulary table is built on the
    first call."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self._table: Tensor | None = None  # [V] bool

    def table(self) -> Tensor:
        """``[V]`` bool: whether each token id of the tokenizer is a boundary token."""
        if self._table is None:
            texts = self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))], skip_special_tokens=True)
            self._table = torch.tensor([BOUNDARY.search(text) is not None for text in texts], dtype=torch.bool)
        return self._table

    def __call__(self, completion_ids: Tensor, mask: Tensor) -> Tensor:
        """Segment ids ``[N, T]`` long of ``completion_ids`` ``[N, T]`` whose real tokens ``mask`` ``[N, T]`` marks.

        Ids outside the tokenizer's vocabulary (models with a padded embedding table) are not boundaries.
        """
        table = self.table().to(completion_ids.device)
        size = table.shape[0]
        in_vocab = completion_ids < size  # [N, T]
        boundary = table[completion_ids.clamp(0, size - 1)] & in_vocab & (mask > 0)  # [N, T]
        closed = boundary.long()
        return closed.cumsum(dim=1) - closed  # [N, T] boundaries strictly before t


__all__ = ["BOUNDARY", "SegmentBoundaries"]
