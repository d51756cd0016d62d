"""Prompt rows passed from Python (``genalign.train(config, train_dataset=..., eval_dataset=...)``), as TRL takes them.

Accepted: a ``datasets.Dataset``, a ``datasets.IterableDataset`` (read to its end once: it must be finite), a list of
row dicts, or any other iterable of row dicts. The rows go through the same column mapping and checks as a file's
(``data.train.columns``, ``shuffle``, ``limit``; a row without a usable ``prompt`` is a
:class:`~genalign.data.errors.DataError` naming ``train_dataset, row N (0-based)``).

Nothing of the rows is written into the run folder. The saved ``config.yaml`` records where they came from and what
they were as the source ``python:rows=N,sha256=HEX`` (:func:`python_source`): the number of rows and a SHA-256 over
their content (JSON with sorted keys; an image or array column hashes its bytes). A resume compares it with the rows it
is given and refuses other rows with a clear error (:mod:`genalign.trainer.run_directory`); a command that reads the
data from the saved config (``genalign eval``, ``genalign sample`` without ``--prompt``) says that the rows must be
passed again or given as a file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from genalign.data.errors import DataError
from genalign.data.sources import PYTHON_PREFIX, DataSourceConfig, finish_rows


def raw_rows(data: Any, argument: str) -> list[dict[str, Any]]:
    """The rows of ``data`` (a ``datasets`` dataset, a list or an iterable of dicts) as a list of plain dicts.

    Raises:
        DataError: ``data`` is a string, a mapping or not iterable, or one of its rows is not a dict; the message
            names ``argument`` and the row.
    """
    if isinstance(data, str | bytes | Mapping) or not isinstance(data, Iterable):
        hint = " (a DatasetDict: pick a split, e.g. dataset['train'])" if isinstance(data, Mapping) else ""
        raise DataError(
            f"{argument}: expected a datasets.Dataset, a list of row dicts or an iterable of them, got "
            f"{type(data).__name__}{hint}. A file path goes into the config: data.train.source=PATH."
        )
    rows = []
    for index, row in enumerate(data):
        if not isinstance(row, Mapping):
            raise DataError(
                f"{argument}, row {index} (0-based): expected a dict with a 'prompt' key, got {type(row).__name__} "
                f"{row!r:.60}."
            )
        rows.append(dict(row))
    return rows


def _hashable(value: Any) -> Any:
    """A JSON stand-in for a value JSON cannot write: the bytes of an image or array, else its ``repr``."""
    to_bytes = getattr(value, "tobytes", None)
    if callable(to_bytes):
        shape = getattr(value, "shape", None) or getattr(value, "size", None)
        return {"type": type(value).__name__, "shape": repr(shape), "sha256": hashlib.sha256(to_bytes()).hexdigest()}
    return repr(value)


def fingerprint(rows: list[dict[str, Any]]) -> str:
    """SHA-256 (first 16 hex digits) of the rows' content, in order."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(json.dumps(row, sort_keys=True, default=_hashable).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def python_source(rows: list[dict[str, Any]]) -> str:
    """The source recorded for rows passed from Python: ``python:rows=N,sha256=HEX``."""
    return f"{PYTHON_PREFIX}rows={len(rows)},sha256={fingerprint(rows)}"


def rows_from_python(data: Any, config: DataSourceConfig, argument: str) -> list[dict[str, Any]]:
    """Rows of ``data`` for training or evaluation, mapped and checked as :func:`genalign.data.load_rows` does for a
    file (``config``: the columns, shuffle and limit of the config's section; its source is the fingerprint)."""
    rows = raw_rows(data, argument)
    return finish_rows(argument, [(f"row {i} (0-based)", row) for i, row in enumerate(rows)], config)


__all__ = ["fingerprint", "python_source", "raw_rows", "rows_from_python"]
