"""Sentence / reasoning-step segments of completions (the ``segment_ids`` rollout-structure signal), from token ids alone.

Definition. Token ``v`` is a *boundary token* when its text (``tokenizer.decode([v], skip_special_tokens=True)``)
contains a newline, or contains ``.``, ``!`` or ``?`` followed by whitespace or by the end of the token's text (regular
expression :data:`BOUNDARY`). Segment 0 starts at the first completion token; a new segment starts right after each
boundary token among the real (masked-in) actions, so ``segment_ids[i, t]`` is the number of boundary tokens in
``completion[i, :t]`` (the boundary token itself closes its segment). Padding continues the last segment, so the ids are
non-decreasing along ``T``.

Step markers (``policy.probes.step_markers``, e.g. ``["Wait", "Alternatively"]``: Step-GRPO's linguistic markers
[114]) also start a segment: at a token whose text, stripped of whitespace, equals a marker, a new segment begins (the
marker opens its step). A segment starts at ``t > 0`` when token ``t - 1`` is a boundary token or token ``t`` a marker,
so a marker right after a newline does not make an empty segment. A marker must be the text of one token of the
vocabulary (the policy checks this when it builds the table and names the marker otherwise).

The rule looks at one token at a time: a token ``"."`` ends a segment even inside ``3 . 14`` when the tokenizer splits
the number there, and ``"Mr."`` ends one too; a token ``"3.14"`` does not. Special tokens decode to nothing and are
never boundaries. The boundary flag of every vocabulary entry is decoded once per tokenizer (:class:`SegmentBoundaries`)
and then read with one gather, so segment ids cost nearly nothing per rollout.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from torch import Tensor

#: Text of a boundary token: a newline, or a sentence end followed by whitespace or the end of the token.
BOUNDARY = re.compile(r"\n|[.!?](?=\s|$)")


class SegmentBoundaries:
    """Segment ids of completions under one tokenizer (see the module docstring); the vocabulary tables are built on
    the first call.

    Args:
        tokenizer: the policy's tokenizer.
        step_markers: token texts that open a new segment (stripped of whitespace when compared); empty: none.
    """

    def __init__(self, tokenizer, step_markers: Sequence[str] = ()) -> None:
        self.tokenizer = tokenizer
        self.step_markers = tuple(step_markers)
        self._table: Tensor | None = None  # [V] bool
        self._opens: Tensor | None = None  # [V] bool

    def _texts(self) -> list[str]:
        return self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))], skip_special_tokens=True)

    def table(self) -> Tensor:
        """``[V]`` bool: whether each token id of the tokenizer is a boundary token (it closes its segment)."""
        if self._table is None:
            self._table = torch.tensor([BOUNDARY.search(text) is not None for text in self._texts()], dtype=torch.bool)
        return self._table

    def opens(self) -> Tensor:
        """``[V]`` bool: whether each token id is a step marker (it opens a segment); a marker that is no token's text
        raises, naming it."""
        if self._opens is None:
            stripped = [text.strip() for text in self._texts()]
            missing = [marker for marker in self.step_markers if marker.strip() not in stripped]
            if missing:
                raise ValueError(
                    f"policy.probes.step_markers: {missing} is not the text of any single token of the tokenizer, so "
                    "no token can open a step with it; use markers that tokenize to one token (e.g. 'Wait')."
                )
            markers = {marker.strip() for marker in self.step_markers}
            self._opens = torch.tensor([text in markers for text in stripped], dtype=torch.bool)
        return self._opens

    def __call__(self, completion_ids: Tensor, mask: Tensor) -> Tensor:
        """Segment ids ``[N, T]`` long of ``completion_ids`` ``[N, T]`` whose real tokens ``mask`` ``[N, T]`` marks.

        Ids outside the tokenizer's vocabulary (models with a padded embedding table) are not boundaries.
        """
        table = self.table().to(completion_ids.device)
        size = table.shape[0]
        in_vocab = completion_ids < size  # [N, T]
        ids = completion_ids.clamp(0, size - 1)  # [N, T]
        real = in_vocab & (mask > 0)  # [N, T]
        closed = table[ids] & real  # [N, T]
        if not self.step_markers:
            return closed.long().cumsum(dim=1) - closed.long()  # [N, T] boundaries strictly before t
        opened = self.opens().to(completion_ids.device)[ids] & real  # [N, T]
        starts = torch.zeros_like(closed)  # [N, T] a segment starts at t > 0
        starts[:, 1:] = closed[:, :-1] | opened[:, 1:]
        return starts.long().cumsum(dim=1)  # [N, T]


__all__ = ["BOUNDARY", "SegmentBoundaries"]
