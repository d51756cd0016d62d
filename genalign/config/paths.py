"""Portable run folders: the paths of the ``config.yaml`` a run writes, and how they are read back.

The rule for paths in YAML:

* a config you write: a path is relative to the folder you run genalign from (the working directory), except a
  reward file (``path/to/file.py:function``), which is relative to the config file;
* the ``config.yaml`` a run writes (into its run folder and into every checkpoint) is portable: every path in it is
  absolute (the model, tokenizer and processor folders, the data files, the reward files: any field marked
  ``"path": True`` in its metadata, :func:`path_fields`), except ``run.output_dir``, which is relative to the config
  file (``.`` in the run folder, ``../..`` in ``checkpoints/step-N``). Reading a saved ``config.yaml`` always takes
  its run folder from where the file is (:func:`place_saved_run`), so a run folder moved or copied elsewhere works from
  any working directory with ``genalign sample``, ``eval``, ``export`` and a resume.

Rows passed from Python are recorded by their fingerprint (``python:rows=N,sha256=HEX``; :mod:`genalign.data.in_memory`)
and a reward function passed from Python by its import path (``module:function``; a function of the script that
started the run is ``__main__:function``, which only that script can load again).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from genalign.config.core import to_dict

#: ``run.output_dir`` as written into the run folder's ``config.yaml`` and into a checkpoint's
RUN_FOLDER_FROM_RUN_CONFIG = "."
RUN_FOLDER_FROM_CHECKPOINT_CONFIG = "../.."


def path_fields(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted field, value)`` of every field marked ``"path": True`` in the config ``obj``, nested sections
    included."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return
    for f in dataclasses.fields(obj):
        value, dotted = getattr(obj, f.name), f"{prefix}{f.name}"
        if f.metadata.get("path"):
            yield dotted, value
        else:
            yield from path_fields(value, dotted + ".")


def _absolute(value: Any) -> Any:
    """A relative path that exists as an absolute path; anything else (a model id, ``builtin:``, ``hf:``) as it is."""
    if not isinstance(value, str) or not value:
        return value
    path = Path(value).expanduser()
    return str(path.resolve()) if not path.is_absolute() and path.exists() else value


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        data = data[key]
    data[last] = value


def saved_run_config(config: Any, *, in_checkpoint: bool) -> dict[str, Any]:
    """The plain form of ``config`` a run writes: every path absolute, ``run.output_dir`` relative to the file (the
    run folder's ``config.yaml``, or with ``in_checkpoint`` a checkpoint's)."""
    data = to_dict(config)
    for dotted, value in path_fields(config):
        _set(data, dotted, _absolute(value))
    run_folder = RUN_FOLDER_FROM_CHECKPOINT_CONFIG if in_checkpoint else RUN_FOLDER_FROM_RUN_CONFIG
    data["run"]["output_dir"] = run_folder
    return data


def place_saved_run(data: dict[str, Any], path: str | Path, *, in_checkpoint: bool) -> None:
    """Set, in place, ``run.output_dir`` of the raw ``config.yaml`` a run wrote at ``path`` to the run folder it is
    in (the file's folder, or two above it for a checkpoint's), whatever the file says (older versions wrote the
    working directory's path)."""
    folder = Path(path).resolve().parent
    run = data.setdefault("run", {})
    if isinstance(run, dict):
        run["output_dir"] = str(folder.parent.parent if in_checkpoint else folder)


def same_setting(before: Any, now: Any) -> bool:
    """Two saved values mean the same: equal, or paths of the same file (a relative path of an older saved config and
    the absolute one written now), compared item by item in mappings."""
    if before == now:
        return True
    if isinstance(before, dict) and isinstance(now, dict):
        return before.keys() == now.keys() and all(same_setting(before[k], now[k]) for k in before)
    if isinstance(before, str) and isinstance(now, str) and before and now:
        return Path(before).expanduser().resolve() == Path(now).expanduser().resolve()
    return False


__all__ = [
    "RUN_FOLDER_FROM_CHECKPOINT_CONFIG",
    "RUN_FOLDER_FROM_RUN_CONFIG",
    "path_fields",
    "place_saved_run",
    "same_setting",
    "saved_run_config",
]
