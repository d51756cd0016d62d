"""Write the JSONL files the full-scale presets read, from a Hub dataset, raw files on the web, or a local copy.

A :class:`DatasetSpec` (the specs live in :mod:`genalign.data.published_datasets`) says where a dataset lives (a Hub id and
subset, or the URLs of raw prompt files), which split feeds which output file, and how one raw row becomes rows of
the output (``convert``). :func:`prepare` does the rest, in this order:

1. load the splits: from ``local`` (``--from``) when given, else from the Hub (``datasets.load_dataset``) or the URLs;
   offline (see :mod:`genalign.data.hub`) it fails at once with the command that makes a local copy;
2. ``select`` (a whole-split step on the raw rows, e.g. AceCode's difficulty filter), then ``convert`` each row
   (``None`` drops it, a list explodes it) and drop repeated ``unique`` values;
3. per output file: ``keep`` filter, ``rows`` slice, ``limit``;
4. images in ``image_columns`` (PIL images or ``{"bytes": ...}`` dicts) are written under ``<out>/<image_root>/images/
   <file stem>/`` and replaced by paths relative to ``<out>/<image_root>`` (the preset's ``policy.image_root``);
   strings are kept as they are (paths into an image folder the user provides, e.g. COCO);
5. each file is written atomically (a temporary file, then a rename), one JSON object per line.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genalign.data.errors import DataError
from genalign.data.hub import env_offline_reason, load_hub_splits, probe, save_to_disk_command
from genalign.data.sources import read_records

Row = dict[str, Any]
LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".txt")
DOWNLOAD_TIMEOUT_S = 60


@dataclass(frozen=True)
class Output:
    """One file written by a spec: ``file`` (relative to ``--out``) holds the converted rows of ``split``."""

    file: str
    split: str
    keep: Callable[[Row], bool] | None = None  # filter on converted rows (e.g. MATH level 3-5)
    rows: slice | None = None  # rows taken after ``keep`` (e.g. a held-out slice of a list without a test split)


@dataclass(frozen=True)
class DatasetSpec:
    """Where one dataset lives and how its rows become the rows the presets read."""

    name: str
    about: str
    presets: tuple[str, ...]
    outputs: tuple[Output, ...]
    convert: Callable[[Row], Row | list[Row] | None]
    hub: str | None = None  # datasets.load_dataset name
    subset: str | None = None  # its configuration
    urls: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # split -> raw files (.txt/.json/.jsonl)
    select: Callable[[list[Row]], list[Row]] | None = None  # whole-split step on the raw rows
    unique: str | None = None  # converted column whose repeated values are dropped (first kept)
    image_columns: tuple[str, ...] = ()
    image_root: str = ""  # folder under --out that image paths are relative to (= the preset's policy.image_root)
    notes: str = ""  # caveats shown by --list and in docs/data.md

    @property
    def splits(self) -> list[str]:
        """The source splits the outputs read, in order of first use."""
        return list(dict.fromkeys(output.split for output in self.outputs))

    def source_text(self) -> str:
        if self.hub:
            return f"hf:{self.hub}" + (f" (subset {self.subset})" if self.subset else "")
        return "; ".join(f"{split}: {', '.join(urls)}" for split, urls in self.urls.items()) or "local copy only"


# ----------------------------------------------------------------------------------------------------------------------
# loading: --from copies, the Hub, URLs
# ----------------------------------------------------------------------------------------------------------------------


def read_local(path: Path, split: str | None = None) -> list[Row]:
    """Raw rows of a local copy: ``.txt`` (one prompt per line) or a JSON list of strings give ``{"prompt": ...}``
    rows; .jsonl/.json/.csv/.parquet files and ``save_to_disk`` folders are read as they are."""
    if path.suffix.lower() == ".txt":
        return [{"prompt": line.strip()} for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if path.suffix.lower() == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, list) and data and all(isinstance(item, str) for item in data):
            return [{"prompt": item} for item in data]
    return read_records(path, split)


def _split_file(folder: Path, split: str) -> Path | None:
    found = [folder / f"{split}{suffix}" for suffix in LOCAL_SUFFIXES if (folder / f"{split}{suffix}").is_file()]
    return found[0] if found else None


def resolve_local(spec: DatasetSpec, sources: Sequence[str]) -> dict[str, list[tuple[Path, str | None]]]:
    """Map each split the spec needs to its local copies: ``[(path, split inside a datasets folder or None), ...]``.

    ``sources`` are ``--from`` values: ``SPLIT=PATH`` pairs (repeat a split to concatenate several files), or one
    ``PATH`` that is a ``save_to_disk`` folder of a DatasetDict, a folder of ``<split>.<jsonl|json|parquet|csv|txt>``
    files, or (for a dataset read from one split) one file or single-Dataset folder.
    """
    needed, found, plain = spec.splits, {}, []
    for source in sources:
        split, sep, path = source.partition("=")
        if sep and split in needed:
            found.setdefault(split, []).append((Path(path).expanduser(), None))
        else:
            plain.append(Path(source).expanduser())
    if len(plain) > 1:
        raise DataError(f"{spec.name}: give one --from PATH, or --from SPLIT=PATH per split ({', '.join(needed)}).")
    for path in plain:
        if not path.exists():
            raise DataError(f"{spec.name}: --from {str(path)!r} does not exist.")
        if (path / "dataset_dict.json").is_file():
            found.update({split: [(path, split)] for split in needed if split not in found})
        elif path.is_dir() and not (path / "dataset_info.json").is_file():
            files = {split: _split_file(path, split) for split in needed if split not in found}
            found.update({split: [(file, None)] for split, file in files.items() if file is not None})
        elif len(needed) == 1:
            found.setdefault(needed[0], [(path, None)])
        else:
            raise DataError(
                f"{spec.name}: {str(path)!r} holds one split but the outputs read splits {needed}; pass "
                + " ".join(f"--from {split}=PATH" for split in needed)
                + ", or a save_to_disk folder of a DatasetDict, or a folder of <split>.jsonl files."
            )
    missing = [split for split in needed if split not in found]
    if missing:
        raise DataError(
            f"{spec.name}: no local copy of split(s) {missing} (the outputs read {needed}); pass --from SPLIT=PATH, a "
            f"save_to_disk folder of a DatasetDict or a folder with {missing[0]}.jsonl (or .json/.parquet/.csv/.txt)."
        )
    return found


def _offline_advice(spec: DatasetSpec) -> str:
    if spec.hub:
        command = save_to_disk_command(spec.hub, spec.subset, None, f"{spec.name}_raw")
        get = f"run on a machine with internet:\n    {command}\ncopy the folder here and pass it:"
        example = f"--from {spec.name}_raw"
    else:
        get = "download " + " and ".join(f"{split}: {' '.join(urls)}" for split, urls in spec.urls.items())
        get += " (e.g. with wget) on a machine with internet, copy the files here and pass them:"
        example = " ".join(f"--from {split}=<file>" for split, urls in spec.urls.items() for _ in urls)
    return f"To prepare it offline, {get}\n    python scripts/prepare_data.py {spec.name} --out data/ {example}"


def _download(url: str, target: Path) -> Path:
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            target.write_bytes(response.read())
    except OSError as error:
        raise DataError(f"could not download {url}: {error}") from error
    return target


def _download_split(spec: DatasetSpec, split: str) -> list[Row]:
    urls = spec.urls[split]
    reason = env_offline_reason() or probe(urls[0])
    if reason is not None:
        raise DataError(
            f"{spec.name}: split {split!r} comes from {', '.join(urls)}, and genalign runs offline here ({reason}). "
            + _offline_advice(spec)
        )
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as folder:
        for number, url in enumerate(urls):
            suffix = Path(url.split("?")[0]).suffix
            rows.extend(read_local(_download(url, Path(folder) / f"{number}{suffix}")))
    return rows


def load_splits(spec: DatasetSpec, local: Sequence[str] | None = None) -> dict[str, list[Row]]:
    """Raw rows of every split the spec's outputs read: ``{split: [row, ...]}``."""
    if local:
        copies = resolve_local(spec, local)
        return {split: [row for path, inner in copies[split] for row in read_local(path, inner)] for split in copies}
    if spec.hub:
        splits = load_hub_splits(spec.hub, spec.subset, None, advice=_offline_advice(spec))
        missing = [split for split in spec.splits if split not in splits]
        if missing:
            raise DataError(f"{spec.source_text()}: no split(s) {missing}; it holds {sorted(splits)}.")
        return {split: splits[split] for split in spec.splits}
    if spec.urls:
        return {split: _download_split(spec, split) for split in spec.splits}
    raise DataError(f"{spec.name}: no public source is wired in; pass a local copy with --from. {spec.notes}")


# ----------------------------------------------------------------------------------------------------------------------
# converting and writing
# ----------------------------------------------------------------------------------------------------------------------


def convert_split(spec: DatasetSpec, raw_rows: list[Row], split: str) -> tuple[list[Row], int]:
    """``(converted rows, number of raw rows dropped)`` of one split; a row that does not fit names its index."""
    if spec.select is not None:
        try:
            raw_rows = spec.select(raw_rows)
        except (KeyError, TypeError, ValueError) as error:
            raise DataError(
                f"{spec.name}, split {split!r}: cannot select rows ({type(error).__name__}: {error}). Is this a copy "
                f"of {spec.source_text()}?"
            ) from error
    rows, dropped, seen = [], 0, set()
    for index, raw in enumerate(raw_rows):
        try:
            converted = spec.convert(raw)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
            raise DataError(
                f"{spec.name}, split {split!r}, row {index} (0-based): cannot convert it ({type(error).__name__}: "
                f"{error}); its fields are {sorted(raw)}. Is this a copy of {spec.source_text()}?"
            ) from error
        if converted is None:
            dropped += 1
            continue
        for row in converted if isinstance(converted, list) else [converted]:
            if spec.unique is not None:
                key = json.dumps(row[spec.unique], sort_keys=True, default=str)
                if key in seen:
                    continue
                seen.add(key)
            rows.append(row)
    return rows, dropped


def _image_file(value: Any, stem: Path) -> Path | None:
    """Write one image value to ``stem`` + its extension; None for values that are not image data."""
    from PIL import Image

    if isinstance(value, Image.Image):
        path = stem.with_suffix(".png")
        value.save(path)
        return path
    if isinstance(value, dict) and value.get("bytes") is not None:
        with Image.open(io.BytesIO(value["bytes"])) as image:
            suffix = {"JPEG": ".jpg", "PNG": ".png"}.get(image.format or "")
            if suffix is None:  # another format: re-encode as PNG
                image.save(stem.with_suffix(".png"))
                return stem.with_suffix(".png")
        stem.with_suffix(suffix).write_bytes(value["bytes"])  # PNG / JPEG bytes are kept as they are
        return stem.with_suffix(suffix)
    return None


def export_images(spec: DatasetSpec, rows: list[Row], out_dir: Path, output: Output) -> list[Row]:
    """Rows whose image data is written to files and replaced by paths relative to ``out_dir / spec.image_root``."""
    if not spec.image_columns:
        return rows
    root = out_dir / spec.image_root
    folder = root / "images" / Path(output.file).stem
    exported = []
    for index, row in enumerate(rows):
        row = dict(row)
        for column in spec.image_columns:
            value = row.get(column)
            values = value if isinstance(value, list) else [value]
            paths = []
            for number, item in enumerate(values):
                if isinstance(item, dict) and item.get("bytes") is None and item.get("path"):
                    item = item["path"]
                folder.mkdir(parents=True, exist_ok=True)
                written = _image_file(item, folder / f"{index:06d}_{number}")
                paths.append(written.relative_to(root).as_posix() if written is not None else item)
            row[column] = paths if isinstance(value, list) else paths[0]
        exported.append(row)
    return exported


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):  # numpy arrays
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable; convert it in the spec's convert function")


def write_jsonl(path: Path, rows: list[Row]) -> None:
    """Write ``rows`` to ``path`` atomically (a temporary file in the same folder, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            for row in rows:
                stream.write(json.dumps(row, ensure_ascii=False, default=_json_default) + "\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def prepare(
    spec: DatasetSpec,
    out_dir: str | Path,
    *,
    local: Sequence[str] | None = None,
    limit: int | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, int]:
    """Write every output file of ``spec`` under ``out_dir``; returns ``{file: rows written}``.

    Args:
        spec: the dataset.
        out_dir: the data folder the presets read (``data/``).
        local: ``--from`` values (see :func:`resolve_local`); None loads from the Hub or the URLs.
        limit: keep at most this many rows per output file (after filters).
        log: where progress lines go.
    """
    if limit is not None and limit < 1:
        raise DataError(f"--limit {limit}: must be a positive number of rows.")
    out_dir = Path(out_dir)
    raw = load_splits(spec, local)
    converted = {}
    for split, raw_rows in raw.items():
        converted[split], dropped = convert_split(spec, raw_rows, split)
        if dropped:
            log(f"{spec.name}: split {split!r}: dropped {dropped} of {len(raw_rows)} rows that do not fit")
    written = {}
    for output in spec.outputs:
        rows = [row for row in converted[output.split] if output.keep is None or output.keep(row)]
        rows = rows[output.rows] if output.rows is not None else rows
        rows = rows[:limit] if limit is not None else rows
        if not rows:
            raise DataError(f"{spec.name}: no rows left for {output.file} (split {output.split!r}).")
        write_jsonl(out_dir / output.file, export_images(spec, rows, out_dir, output))
        written[output.file] = len(rows)
        log(f"{spec.name}: wrote {len(rows)} rows to {out_dir / output.file}")
    return written
