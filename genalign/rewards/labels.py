"""``row_label``: a dataset column's value as a number, so that options which group samples by a label of their row
(the ``domain_scaled`` combiner's domains, DRPO [25]) can read it from the reward table.

It is a reward column, not a reward: the options that read a label column leave it out of the combined reward, and
``weight: 0`` keeps it out of every other combination (it is still logged, ``reward/<name>/mean``).

A value listed in ``values`` is mapped to its position there; with ``values`` unset a number is kept as it is and any
other value (a string such as ``"radiology"``) is mapped to ``crc32(str(value)) mod 2^24``, a stable id that a
float32 reward table holds exactly (distinct strings collide with probability about ``1/16.7M`` per pair). A row
whose label is null (or missing while other rows of the batch have it) gets ``None``, a missing reward that the
reading option treats as one more label of its own; a batch in which no row has the column raises, naming it.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from typing import Any

from genalign.rewards.base import register_reward
from genalign.rewards.inputs import check_column

#: label ids made from text stay below this, so a float32 reward table holds them exactly
ID_RANGE = 2**24


def label_id(value: Any) -> float:
    """The id of a label without a ``values`` list: a finite number as it is, else ``crc32(str(value)) mod 2^24``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return float(zlib.crc32(str(value).encode("utf-8")) % ID_RANGE)


@register_reward("row_label", source="rule")
class RowLabel:
    """The label in dataset column ``column`` as a number (module docstring).

    Args:
        column: the row column holding the label (e.g. ``domain`` or ``modality``).
        values: the expected labels in order (a label maps to its position); a label not among them raises, naming
            the column, the value and the labels expected. None: numbers as they are, other values hashed.
    """

    def __init__(self, *, column: str, values: Sequence[Any] | None = None) -> None:
        if not isinstance(column, str) or not column:
            raise ValueError(f"row_label: column={column!r} must name the dataset column that holds the label.")
        self.column = column
        self.positions = None if values is None else {str(value): float(i) for i, value in enumerate(values)}

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        labels = check_column(self.column, columns.get(self.column), len(completions), "row_label")
        return [None if label is None else self._id(label) for label in labels]

    def _id(self, label: Any) -> float:
        if self.positions is None:
            return label_id(label)
        if str(label) not in self.positions:
            raise ValueError(f"row_label: column {self.column!r} holds {label!r}, which is not one of values="
                             f"{list(self.positions)}; add it to values or remove values to hash every label.")  # fmt: skip
        return self.positions[str(label)]


__all__ = ["ID_RANGE", "RowLabel", "label_id"]
