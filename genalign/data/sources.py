"""Prompt datasets from local files or procedural generators, as a list of row dicts.

``load_rows(DataSourceConfig(...))`` reads one source and returns rows that all hold ``"prompt"`` (a string, or a list
of chat messages ``{"role": ..., "content": ...}``) plus every other column, renamed through ``columns``. Rows are kept
in memory: prompt sets for RL are small (thousands to a few hundred thousand rows).

Supported sources:

* ``*.jsonl`` (one JSON object per line), ``*.json`` (a list of objects), ``*.csv`` (header row; empty cells are
  ``None``), ``*.parquet`` (needs ``pyarrow``), a folder written by ``datasets.Dataset.save_to_disk`` (needs
  ``datasets``);
* ``"procedural:<task>"``: a generator from :data:`genalign.data.procedural.PROCEDURAL_TASKS`, called with
  ``size`` and ``seed`` taken from ``args`` and the remaining ``args`` as keyword arguments;
* ``"hf:ORG/NAME"`` (or ``"hf:NAME"``): a Hugging Face Hub dataset read with ``datasets.load_dataset(name, subset,
  split=split)``. Offline (``HF_HUB_OFFLINE=1``, or the Hub does not answer within 2 s) only the local datasets cache
  is read, and a dataset that is not there fails at once with the command that pre-downloads it (see
  :mod:`genalign.data.hub`).
* ``"python:rows=N,sha256=HEX"``: rows passed to ``genalign.train(train_dataset=..., eval_dataset=...)`` from Python
  (:mod:`genalign.data.in_memory`); the saved config records only this fingerprint, so :func:`load_rows` refuses it
  with how to pass the rows again.

A bad row raises :class:`DataError` naming the file, the row (``line N`` for text files, 1-based; ``row N`` for
Parquet, ``datasets`` folders and Hub datasets, 0-based) and the column; so does a file that is not UTF-8 text (with
its line) or not a readable Parquet file. Every row keeps where it was read under
:data:`~genalign.data.errors.LOCATION_KEY`, for errors found later (a prompt too long for the policy, an answer of the
wrong type).
"""

from __future__ import annotations

import csv
import inspect
import io
import json
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from genalign.data.errors import LOCATION_KEY, DataError
from genalign.data.hub import HUB_NAME, HUB_PREFIX, describe, load_hub_splits, rows_of_split, save_to_disk_command
from genalign.data.procedural import PROCEDURAL_TASKS
from genalign.errors import UserPathError
from genalign.registry import did_you_mean

PROCEDURAL_PREFIX = "procedural:"
#: the source recorded for rows passed to ``genalign.train`` from Python: ``python:rows=N,sha256=HEX``
PYTHON_PREFIX = "python:"
FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


@dataclass
class DataSourceConfig:
    """Where prompts come from and how their columns are named."""

    #: where the config holds this source (``data.train``, ``data.eval``; set by the config's data section), for
    #: the messages of errors found when it is read
    config_path: ClassVar[str] = "data"

    source: str = field(
        default="",
        metadata={
            "help": "A .jsonl/.json/.csv/.parquet file, a folder saved with datasets' save_to_disk, "
            "'procedural:<task>' (tasks: arithmetic, reasoning_gym, ...) or 'hf:ORG/NAME' (a Hugging Face Hub "
            "dataset; offline, only the local cache is read).",
            "path": True,
        },
    )
    columns: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "Our column name -> the source's column name, e.g. {prompt: question, answer: solution}. "
            "Unmapped columns keep their names."
        },
    )
    args: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Arguments of a procedural task: size, seed, split and the task's own (digits, task ...)."},
    )
    subset: str | None = field(
        default=None,
        metadata={"help": "Configuration of an hf: dataset (load_dataset's second argument), e.g. 'main' for gsm8k."},
    )
    split: str | None = field(
        default=None,
        metadata={
            "help": "Split to read from an hf: dataset (e.g. 'train', or 'train[:1000]') or from a datasets folder "
            "holding a DatasetDict; may be left out when there is only one."
        },
    )
    limit: int | None = field(default=None, metadata={"help": "Keep only the first N rows (after shuffling)."})
    shuffle: bool = field(default=False, metadata={"help": "Shuffle rows once, with `seed`, before `limit`."})
    seed: int = field(default=0, metadata={"help": "Seed of the shuffle."})

    def validate(self) -> None:
        if not self.source:
            raise ValueError(
                "data.source is empty; set it to a .jsonl/.json/.csv/.parquet file, a datasets folder, "
                "'procedural:<task>' or 'hf:ORG/NAME'."
            )
        if self.subset is not None and not self.source.startswith(HUB_PREFIX):
            raise ValueError(
                f"data.subset={self.subset!r} only applies to hf: sources, but data.source={self.source!r}; remove "
                f"data.subset (or write data.source: hf:<name> for a Hub dataset)."
            )
        if self.source.startswith(PYTHON_PREFIX):
            self._validate_python()
        elif self.source.startswith(HUB_PREFIX):
            self._validate_hub()
        elif self.source.startswith(PROCEDURAL_PREFIX):
            self._validate_procedural()
        else:
            self._validate_file()
        for ours, theirs in self.columns.items():
            if not isinstance(theirs, str) or not theirs:
                raise ValueError(
                    f"data.columns.{ours}={theirs!r}: the value must be the source's column name (a string)."
                )
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"data.limit={self.limit!r} must be a positive integer or null (all rows).")

    def _validate_python(self) -> None:
        for key in ("args", "subset", "split"):
            if getattr(self, key):
                raise ValueError(
                    f"data.{key}={getattr(self, key)!r} does not apply to rows passed from Python "
                    f"(data.source={self.source!r}); remove data.{key}."
                )

    def _validate_procedural(self) -> None:
        task = self.source[len(PROCEDURAL_PREFIX) :]
        if task not in PROCEDURAL_TASKS:
            names = PROCEDURAL_TASKS.names()
            raise ValueError(
                f"data.source={self.source!r}: unknown procedural task {task!r}.{did_you_mean(task, names)} "
                f"Valid: {', '.join(PROCEDURAL_PREFIX + n for n in names)}."
            )
        accepted = [
            name
            for name, parameter in inspect.signature(PROCEDURAL_TASKS.get(task)).parameters.items()
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY
        ] + ["size", "seed"]
        for key in self.args:
            if key not in accepted:
                raise ValueError(
                    f"data.args.{key}: unknown argument of procedural task {task!r}."
                    f"{did_you_mean(key, accepted)} Valid: {', '.join(sorted(accepted))}."
                )
        size = self.args.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(
                f"data.args.size={size!r}: a procedural source needs a positive integer size; set e.g. "
                "data.args.size=1000."
            )

    def _validate_file(self) -> None:
        if self.args:
            raise ValueError(
                f"data.args={self.args!r} only applies to procedural sources, but data.source={self.source!r} "
                "is a file; remove data.args."
            )
        suffix = Path(self.source).suffix.lower()
        if suffix and suffix not in FILE_SUFFIXES and not Path(self.source).is_dir():
            raise ValueError(
                f"data.source={self.source!r}: unsupported file type {suffix!r}; use one of "
                f"{', '.join(FILE_SUFFIXES)}, a datasets save_to_disk folder, 'procedural:<task>' or 'hf:ORG/NAME'."
            )

    def _validate_hub(self) -> None:
        name = self.source[len(HUB_PREFIX) :].strip()
        if not HUB_NAME.fullmatch(name):
            raise ValueError(
                f"data.source={self.source!r}: {name!r} is not a Hub dataset id; write 'hf:ORG/NAME' or 'hf:NAME' "
                "(letters, digits, '-', '_', '.'), e.g. 'hf:openai/gsm8k'. A local folder or file needs no prefix."
            )
        if self.args:
            raise ValueError(
                f"data.args={self.args!r} only applies to procedural sources, but data.source={self.source!r} is a "
                "Hub dataset; remove data.args (choose the configuration with data.subset, the split with data.split)."
            )
        for key in ("subset", "split"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"data.{key}={value!r} must be a non-empty name or null.")


# ----------------------------------------------------------------------------------------------------------------------
# readers: (path) -> iterator of (location, raw row)
# ----------------------------------------------------------------------------------------------------------------------


def _decode(path: Path, data: bytes, line_number: int | None = None) -> str:
    """``data`` (the file, or its line ``line_number``) as UTF-8 text; a DataError naming the file and line if not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = line_number if line_number is not None else data[: error.start].count(b"\n") + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise DataError(
            f"{path}, line {line}: not UTF-8 text (byte {data[error.start]:#04x} at column {column}); save the file as "
            "UTF-8 (e.g. iconv -f latin1 -t utf-8)."
        ) from None


def _read_jsonl(path: Path) -> list[tuple[str, dict[str, Any]]]:
    rows = []
    with path.open("rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            line = _decode(path, raw, line_number)
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataError(
                    f"{path}, line {line_number}: invalid JSON ({error.msg} at column {error.colno})."
                ) from None
            if not isinstance(row, dict):
                raise DataError(f"{path}, line {line_number}: expected a JSON object, got {type(row).__name__}.")
            rows.append((f"line {line_number}", row))
    return rows


def _read_json(path: Path) -> list[tuple[str, dict[str, Any]]]:
    try:
        data = json.loads(_decode(path, path.read_bytes()))
    except json.JSONDecodeError as error:
        raise DataError(f"{path}: invalid JSON ({error.msg} at line {error.lineno}, column {error.colno}).") from None
    if not isinstance(data, list):
        raise DataError(
            f"{path}: expected a JSON list of objects, got {type(data).__name__}; use one object per line in a "
            ".jsonl file or wrap the rows in a list."
        )
    rows = []
    for index, row in enumerate(data):
        if not isinstance(row, dict):
            raise DataError(f"{path}, item {index} (0-based): expected a JSON object, got {type(row).__name__}.")
        rows.append((f"item {index} (0-based)", row))
    return rows


def _read_csv(path: Path) -> list[tuple[str, dict[str, Any]]]:
    rows = []
    with io.StringIO(_decode(path, path.read_bytes()), newline="") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames:
            raise DataError(f"{path}: the CSV file has no header row.")
        for row in reader:
            if None in row:  # more cells than header names
                raise DataError(
                    f"{path}, line {reader.line_num}: more cells than the {len(reader.fieldnames)} header columns."
                )
            rows.append(
                (
                    f"line {reader.line_num}",
                    {key: (None if value in ("", None) else value) for key, value in row.items()},
                )
            )
    return rows


def _read_parquet(path: Path) -> list[tuple[str, dict[str, Any]]]:
    try:
        import pyarrow
        import pyarrow.parquet as parquet
    except ImportError as error:
        raise ImportError(f"reading {path} needs pyarrow: pip install pyarrow") from error
    try:
        table = parquet.read_table(path)
    except (OSError, pyarrow.ArrowException) as error:
        raise DataError(
            f"{path}: not a readable Parquet file ({str(error).splitlines()[0]}); check the file, or give the rows as "
            ".jsonl, .json or .csv."
        ) from None
    return [(f"row {index} (0-based)", row) for index, row in enumerate(table.to_pylist())]


def _read_datasets_folder(path: Path, split: str | None) -> list[tuple[str, dict[str, Any]]]:
    try:
        import datasets
    except ImportError as error:
        raise ImportError(
            f"reading the datasets folder {path} needs the datasets package: pip install datasets"
        ) from error
    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError as error:
        raise DataError(
            f"{path}: a folder, but not one written by datasets' save_to_disk ({error}); give a .jsonl, .json, .csv "
            "or .parquet file, or a save_to_disk folder."
        ) from None
    if isinstance(loaded, datasets.DatasetDict):
        splits = list(loaded.keys())
        if split is None and len(splits) == 1:
            split = splits[0]
        if split not in loaded:
            raise DataError(
                f"{path}: holds splits {splits}; set data.split to one of them (got {split!r})."
                + did_you_mean(split or "", splits)
            )
        loaded = loaded[split]
    elif split is not None:
        raise DataError(f"{path}: holds a single Dataset, not a DatasetDict; remove data.split={split!r}.")
    return [(f"row {index} (0-based)", dict(row)) for index, row in enumerate(loaded)]


def _hub_advice(name: str, subset: str | None, split: str | None) -> str:
    """What to do when ``hf:name`` is out of reach: the save_to_disk command and the prepare script."""
    folder = "data/" + re.sub(r"\W+", "_", name.split("/")[-1] + (f"_{split}" if split else "")).strip("_").lower()
    then = f"data.source: {folder}" + ("" if split else " with data.split: <split>") + " and remove data.subset"
    return (
        f"Pre-download it on a machine with internet and copy the folder to this one:\n"
        f"    {save_to_disk_command(name, subset, split, folder)}\n"
        f"then set {then}. For the presets' datasets, `python scripts/prepare_data.py --list` names the script that "
        "writes their JSONL files (see docs/data.md)."
    )


def _read_hub(config: DataSourceConfig) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    name = config.source[len(HUB_PREFIX) :].strip()
    where = describe(name, config.subset, config.split)
    splits = load_hub_splits(name, config.subset, config.split, advice=_hub_advice(name, config.subset, config.split))
    rows = rows_of_split(splits, config.split, where)
    return where, [(f"row {index} (0-based)", row) for index, row in enumerate(rows)]


def _looks_like_hub_name(source: str) -> bool:
    return source.count("/") == 1 and bool(HUB_NAME.fullmatch(source)) and Path(source).suffix not in FILE_SUFFIXES


def read_records(path: str | Path, split: str | None = None) -> list[dict[str, Any]]:
    """Raw rows of a local .jsonl/.json/.csv/.parquet file or ``save_to_disk`` folder, without column checks."""
    path = Path(path).expanduser()
    if not path.exists():
        raise UserPathError(f"{str(path)!r} does not exist (resolved to {path.resolve()}).")
    return [row for _, row in _read_path(path, split)]


def _read_path(path: Path, split: str | None) -> list[tuple[str, dict[str, Any]]]:
    if path.is_dir():
        return _read_datasets_folder(path, split)
    readers = {".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv, ".parquet": _read_parquet}
    suffix = path.suffix.lower()
    if suffix not in readers:
        raise DataError(
            f"{path}: unsupported file type {suffix!r}; use one of {', '.join(readers)} or a datasets folder."
        )
    return readers[suffix](path)


def _read_source(config: DataSourceConfig) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """``(name used in error messages, [(location, raw row), ...])`` for the configured source."""
    if config.source.startswith(PROCEDURAL_PREFIX):
        task = config.source[len(PROCEDURAL_PREFIX) :]
        args = dict(config.args)
        size, seed = args.pop("size"), args.pop("seed", 0)
        generated = PROCEDURAL_TASKS.get(task)(size, seed, **args)
        return config.source, [(f"row {index} (0-based)", row) for index, row in enumerate(generated)]
    if config.source.startswith(HUB_PREFIX):
        return _read_hub(config)
    path = Path(config.source).expanduser()
    if not path.exists():
        hint = (
            f" It looks like a Hub dataset id: write data.source: {HUB_PREFIX}{config.source} (with data.subset / "
            "data.split as needed) to read it from the Hugging Face Hub or the local datasets cache."
            if _looks_like_hub_name(config.source)
            else ""
        )
        raise UserPathError(
            f"{config.config_path}.source: {config.source!r} does not exist (resolved to {path.resolve()}).{hint}"
        )
    return str(path), _read_path(path, config.split)


# ----------------------------------------------------------------------------------------------------------------------
# row checks
# ----------------------------------------------------------------------------------------------------------------------


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _check_prompt(prompt: Any, where: str, column: str) -> None:
    if isinstance(prompt, str):
        if not prompt.strip():
            raise DataError(f"{where}, column {column!r}: the prompt is empty.")
        return
    if isinstance(prompt, list) and prompt:
        for index, message in enumerate(prompt):
            if not (
                isinstance(message, dict)
                and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)
            ):
                raise DataError(
                    f"{where}, column {column!r}: chat message {index} must be a dict with string 'role' and "
                    f"'content', got {message!r}."
                )
        return
    raise DataError(
        f"{where}, column {column!r}: a prompt must be a non-empty string or a list of chat messages, "
        f"got {type(prompt).__name__} {prompt!r:.80}."
    )


def _map_row(raw: dict[str, Any], columns: dict[str, str], required: list[str], where: str) -> dict[str, Any]:
    """Rename ``raw`` through ``columns`` (ours -> theirs) and check that every required column holds a value."""
    renamed_sources = set(columns.values())
    row = {key: value for key, value in raw.items() if key not in renamed_sources}
    for ours, theirs in columns.items():
        if theirs not in raw:
            raise DataError(
                f"{where}: column {theirs!r} (mapped to {ours!r} by data.columns) is missing; available columns: "
                f"{sorted(raw)}.{did_you_mean(theirs, sorted(raw))}"
            )
        row[ours] = raw[theirs]
    for ours in required:
        theirs = columns.get(ours, ours)
        if ours not in row:
            hint = "" if ours in columns else f" Map it with data.columns.{ours}=<your column>."
            raise DataError(
                f"{where}: required column {theirs!r} is missing; available columns: {sorted(raw)}.{hint}"
                f"{did_you_mean(theirs, sorted(raw))}"
            )
        if _is_missing(row[ours]):
            raise DataError(f"{where}, column {theirs!r}: the value is empty (null/NaN).")
    _check_prompt(row["prompt"], where, columns.get("prompt", "prompt"))
    row[LOCATION_KEY] = where
    return row


def load_rows(config: DataSourceConfig, *, required: list[str] | tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Read the configured source into rows with ``"prompt"`` and the other (renamed) columns.

    Args:
        config: the data source; validated here.
        required: columns (our names) every row must hold with a non-null value, besides ``"prompt"``, e.g. the
            ``answer`` column an exact-match reward reads.

    Returns:
        ``[{"prompt": str | list[dict], <column>: value, ..., "_location": "<file>, line 7"}, ...]`` (where each
        row was read: :data:`~genalign.data.errors.LOCATION_KEY`), shuffled with ``config.seed`` when
        ``config.shuffle`` and cut to ``config.limit``.

    Raises:
        DataError: a bad file or row (message names the file, the row and the column).
        UserPathError: the file does not exist (a missing ``ORG/NAME`` path suggests ``hf:ORG/NAME``); a
            FileNotFoundError.
        ImportError: Parquet or ``datasets`` support is not installed (message says what to install).
    """
    config.validate()
    if config.source.startswith(PYTHON_PREFIX):
        raise DataError(
            f"{config.config_path}.source = {config.source!r}: these rows were passed to genalign.train() from Python "
            f"and are not saved with the run (only their fingerprint is). Pass them again "
            f"(genalign.train(config, {config.config_path.split('.')[-1]}_dataset=...)), or set "
            f"{config.config_path}.source to a file, e.g. {config.config_path}.source=prompts.jsonl."
        )
    name, raw_rows = _read_source(config)
    return finish_rows(name, raw_rows, config, required)


def finish_rows(
    name: str, raw_rows: list[tuple[str, dict[str, Any]]], config: DataSourceConfig, required: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Rows with ``"prompt"`` from ``[(location, raw row), ...]`` read from the source ``name``: renamed through
    ``config.columns``, checked, shuffled and cut as configured (:func:`load_rows`)."""
    if not raw_rows:
        raise DataError(f"{name}: the source holds no rows.")
    required_columns = ["prompt", *(c for c in required if c != "prompt")]
    rows = [_map_row(raw, config.columns, required_columns, f"{name}, {location}") for location, raw in raw_rows]
    if config.shuffle:
        random.Random(config.seed).shuffle(rows)
    if config.limit is not None:
        rows = rows[: config.limit]
    return rows


__all__ = [
    "FILE_SUFFIXES",
    "HUB_PREFIX",
    "LOCATION_KEY",
    "PYTHON_PREFIX",
    "DataError",
    "DataSourceConfig",
    "finish_rows",
    "load_rows",
    "read_records",
]
