"""Paths in configs: one rule for a config file, and portable run folders.

The rule: **a relative path in a config file is relative to the folder of that file.** ``genalign train
configs/x.yaml`` reads ``configs/x.yaml``'s ``../data/train.jsonl`` as ``<repo>/data/train.jsonl`` from any working
directory. A path is:

* a config field that names a file or folder: the model, tokenizer and processor folders, the data files, an image
  root (any field marked ``"path": True`` in its metadata, :func:`path_fields`), ``run.output_dir`` and
  ``run.resume`` (a checkpoint folder; ``latest`` is not a path). A field that may also hold a hub id (``org/name``,
  metadata ``"hub_id": True``: the model, tokenizer and processor) keeps a value that does not exist next to the config
  and does not look like a path (``./``, ``../``, two ``/`` or more) as the hub id it is;
* code named by file, ``path/to/file.py:Name``, wherever it appears (a reward's ``fn``, an environment or a tool);
* an argument a registered reward declares as a path (registry meta ``path_args``: weights files, model folders).

Not paths: values with a scheme (``builtin:``, ``procedural:``, ``hf:``, ``python:``), absolute paths and ``~``
paths (as written), and the other values of ``args`` mappings (handed to the code as written). Paths given on the
command line as ``key=value`` overrides are relative to the working directory, and so are those of a config built in
Python (``genalign.train(config_dict)``: it has no file).

The ``config.yaml`` a run writes (into its run folder and into every checkpoint) is portable: every path in it is
absolute (:func:`saved_run_config`), except ``run.output_dir``, which is relative to the file by the same rule (``.``
in the run folder, ``../..`` in ``checkpoints/step-N``). Reading a saved ``config.yaml`` always takes its run folder
from where the file is (:func:`place_saved_run`), so a run folder moved or copied elsewhere works from any working
directory with ``genalign sample``, ``eval``, ``export`` and a resume. (Older versions wrote paths relative to the
launch folder into it: a saved config's paths are read as written, never from its folder.)

Rows passed from Python are recorded by their fingerprint (``python:rows=N,sha256=HEX``; :mod:`genalign.data.in_memory`)
and a reward function passed from Python by its import path (``module:function``; a function of the script that
started the run is ``__main__:function``, which only that script can load again).
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

from genalign.config.core import ConfigError, to_dict

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


#: a value that names something other than a file (``builtin:``, ``procedural:``, ``hf:``, ``python:``, a URL)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")
#: code named by file: ``path/to/file.py:Name``
CODE_FILE = re.compile(r"^(?P<file>[^:\s]+\.py):(?P<name>[A-Za-z_][A-Za-z0-9_.]*)$")


def _looks_local(value: str) -> bool:
    """A filesystem path rather than a hub id (``org/name``): ``./``, ``../``, two ``/`` or more, a backslash."""
    return value.startswith(("./", "../", ".\\")) or value.count("/") > 1 or "\\" in value


def from_folder(value: Any, folder: Path, *, hub_id: bool = False, keywords: tuple[str, ...] = ()) -> Any:
    """``value`` read from a config file in ``folder``: a relative path joined to ``folder`` (normalised, ``..``
    collapsed); a scheme value, an absolute or ``~`` path, one of ``keywords`` or, with ``hub_id``, a hub id that no
    path next to the config shadows, as written (module docstring)."""
    if not isinstance(value, str) or not value or value in keywords or SCHEME.match(value):
        return value
    if value.startswith("~") or Path(value).is_absolute():
        return value
    joined = folder / value
    if hub_id and not joined.exists() and not _looks_local(value):
        return value
    return os.path.normpath(joined)


def _code_from_folder(value: Any, folder: Path) -> Any:
    """Every ``path/to/file.py:Name`` in ``value`` (strings, lists, mappings) with its file read from ``folder``."""
    if isinstance(value, dict):
        return {key: _code_from_folder(item, folder) for key, item in value.items()}
    if isinstance(value, list):
        return [_code_from_folder(item, folder) for item in value]
    if isinstance(value, str) and (match := CODE_FILE.match(value)):
        return f"{from_folder(match['file'], folder)}:{match['name']}"
    return value


def _nested(tp: Any, value: Any) -> list[tuple[type, Any]]:
    """``(dataclass, raw mapping)`` of the sections a field of type ``tp`` holds in ``value``."""
    if get_origin(tp) in (Union, types.UnionType):
        return [pair for arg in get_args(tp) if arg is not type(None) for pair in _nested(arg, value)]
    if get_origin(tp) is list and isinstance(value, list):
        (item_tp,) = get_args(tp) or (Any,)
        return [pair for item in value for pair in _nested(item_tp, item)]
    return [(tp, value)] if dataclasses.is_dataclass(tp) and isinstance(value, dict) else []


def _fields_from_folder(cls: type, data: dict[str, Any], folder: Path) -> None:
    """Rewrite, in place, the path fields of the raw section ``data`` of dataclass ``cls`` (and of its sections)."""
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        if f.metadata.get("path"):
            data[f.name] = from_folder(
                data[f.name], folder, hub_id=f.metadata.get("hub_id", False), keywords=f.metadata.get("not_paths", ())
            )
            continue
        tp = hints[f.name]
        if (resolve := f.metadata.get("resolve")) is not None:
            try:
                tp = resolve(data[f.name], f.name)
            except ConfigError:  # reported when the config is checked
                continue
        for section_cls, section in _nested(tp, data[f.name]):
            _fields_from_folder(section_cls, section, folder)


def paths_from_config_file(data: dict[str, Any], config_file: str | Path, schema: type) -> None:
    """Rewrite, in place, every relative path of the raw config ``data`` read from ``config_file`` (of dataclass
    ``schema``) into the path from the file's folder: the path fields, code named by file and the path arguments of
    registered rewards (module docstring)."""
    from genalign.catalog.registries import options

    folder = Path(config_file).resolve().parent
    _fields_from_folder(schema, data, folder)
    data.update(_code_from_folder(data, folder))
    rewards = data.get("rewards")
    for reward in rewards if isinstance(rewards, list) else []:
        if isinstance(reward, dict):
            _reward_args_from_folder(reward.get("fn"), reward.get("args"), folder, options("rewards"))


def _reward_args_from_folder(fn: Any, args: Any, folder: Path, registry: Any) -> None:
    """Rewrite, in place, the path arguments (meta ``path_args``) of registered reward ``fn`` in ``args``, and those of
    the rewards it is built from (meta ``inner_rewards``, :func:`genalign.rewards.register_reward`)."""
    if not (isinstance(fn, str) and isinstance(args, dict) and fn in registry):
        return
    meta = registry.meta(fn)
    for key in set(meta.get("path_args", ())) & set(args):
        args[key] = from_folder(args[key], folder)
    for place in meta.get("inner_rewards", ()):
        if "name" in place:
            _reward_args_from_folder(args.get(place["name"]), args.get(place["args"]), folder, registry)
        elif isinstance(spec := args.get(place.get("spec")), dict):
            _reward_args_from_folder(spec.get("fn"), spec.get("args"), folder, registry)
        elif isinstance(named := args.get(place.get("by_name")), dict):
            for name, entry in named.items():
                _reward_args_from_folder(name, entry.get("args") if isinstance(entry, dict) else None, folder, registry)


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
    "from_folder",
    "path_fields",
    "paths_from_config_file",
    "place_saved_run",
    "same_setting",
    "saved_run_config",
]
