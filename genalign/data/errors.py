"""The error every data reader raises for a bad source or row (shared by :mod:`.sources`, :mod:`.hub` and
:mod:`.prepare`, so that none of them imports another just for the class), and where a row came from.

:func:`genalign.data.load_rows` records in each row, under :data:`LOCATION_KEY`, where it was read: ``"data.jsonl,
line 7"`` (1-based lines for JSONL and CSV files), ``"data.json, item 3 (0-based)"``, ``"data.parquet, row 5
(0-based)"``. Whoever finds a row unusable later (a prompt too long for the policy, an answer of the wrong type) names
it with :func:`row_location`, so the message points at the line of the file, not at a position in a batch. Reward
functions receive it as the ``_location`` column like every other column.
"""

from __future__ import annotations

from typing import Any

from genalign.errors import UserError

#: the row key that holds where the row was read (a file and line); set by load_rows
LOCATION_KEY = "_location"


class DataError(UserError, ValueError):
    """A dataset file or row that cannot be used; the message names the file, the row and the column."""


def row_location(row: Any, index: int) -> str:
    """Where ``row`` came from (``"data.jsonl, line 7"``), or ``"row {index} of the batch"`` for rows that were not
    read by :func:`genalign.data.load_rows` (prompts given on the command line, rows built in Python)."""
    location = row.get(LOCATION_KEY) if isinstance(row, dict) else None
    return location if isinstance(location, str) and location else f"row {index} of the batch"


__all__ = ["LOCATION_KEY", "DataError", "row_location"]
