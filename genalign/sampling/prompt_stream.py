"""An endless, resumable stream of prompt rows: seeded reshuffle every epoch, position kept as one integer."""

from __future__ import annotations

from typing import Any

import torch


class PromptStream:
    """Yields rows in epochs; epoch ``e`` is a permutation seeded by ``(seed, e)``.

    The whole state is :attr:`cursor` (rows consumed so far), so resuming needs that one number.
    """

    def __init__(self, rows: list[dict[str, Any]], seed: int, cursor: int = 0) -> None:
        if not rows:
            raise ValueError("the training data source yielded no rows; check data.train (source, limit, filters).")
        self.rows = rows
        self.seed = seed
        self.cursor = cursor
        self._order: dict[int, list[int]] = {}

    def _epoch_order(self, epoch: int) -> list[int]:
        if epoch not in self._order:
            gen = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            self._order = {epoch: torch.randperm(len(self.rows), generator=gen).tolist()}
        return self._order[epoch]

    def row_index(self, position: int) -> int:
        """The index in :attr:`rows` of the row at stream ``position`` (the same prompt in every epoch)."""
        epoch, offset = divmod(position, len(self.rows))
        return self._epoch_order(epoch)[offset]

    def take(self, count: int) -> list[tuple[int, dict[str, Any]]]:
        """The next ``count`` rows with their global stream positions (unique ids across epochs)."""
        out = []
        for _ in range(count):
            epoch, offset = divmod(self.cursor, len(self.rows))
            out.append((self.cursor, self.rows[self._epoch_order(epoch)[offset]]))
            self.cursor += 1
        return out
