"""Saving training state without pickle: tensors in safetensors, everything else in JSON.

``save_state(obj, stem)`` writes ``stem.json`` (the structure, with every tensor replaced by a reference) and
``stem.safetensors`` (the tensors); ``load_state(stem)`` rebuilds the object. Supported values: tensors, numpy arrays,
dicts (any str / int / float / bool keys), lists, tuples, str, int, float (NaN and inf included), bool and None —
what optimizer, scheduler, random-generator and policy states are made of. Loading never executes code from the files:
the JSON decoder builds plain values and safetensors reads raw buffers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

TENSOR, ARRAY, TUPLE, DICT = "__tensor__", "__ndarray__", "__tuple__", "__dict__"


class StateFormatError(ValueError):
    """A state holds a value that cannot be saved safely, or a state file is malformed."""


def _encode(value: Any, tensors: dict[str, torch.Tensor], where: str) -> Any:
    if isinstance(value, torch.Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = value.detach().cpu().contiguous().clone()
        return {TENSOR: key}
    if isinstance(value, np.ndarray):
        key = f"t{len(tensors)}"
        tensors[key] = torch.from_numpy(value.astype(np.int64) if value.dtype.kind in "ui" else value.copy())
        return {ARRAY: key, "dtype": value.dtype.str}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: _encode(v, tensors, f"{where}[{k!r}]") for k, v in value.items()}
        if not all(isinstance(k, str | int | float | bool) for k in value):
            raise StateFormatError(f"{where}: dictionary keys must be str, int, float or bool to be saved")
        return {DICT: [[k, _encode(v, tensors, f"{where}[{k!r}]")] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {TUPLE: [_encode(v, tensors, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, tensors, f"{where}[{i}]") for i, v in enumerate(value)]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise StateFormatError(
        f"{where}: cannot save a {type(value).__name__} without pickle; state must be tensors, numpy arrays and plain "
        "values (dict, list, tuple, str, int, float, bool, None)"
    )


def _decode(value: Any, tensors: dict[str, torch.Tensor], where: str) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors, where) for v in value]
    if not isinstance(value, dict):
        return value
    if TENSOR in value or ARRAY in value:
        key = value.get(TENSOR, value.get(ARRAY))
        if key not in tensors:
            raise StateFormatError(f"{where}: tensor {key!r} is missing from the .safetensors file")
        if TENSOR in value:
            return tensors[key]
        return tensors[key].numpy().astype(np.dtype(value["dtype"]))
    if TUPLE in value:
        return tuple(_decode(v, tensors, where) for v in value[TUPLE])
    if DICT in value:
        return {k: _decode(v, tensors, where) for k, v in value[DICT]}
    return {k: _decode(v, tensors, where) for k, v in value.items()}


def save_state(value: Any, stem: Path) -> list[Path]:
    """Write ``stem.json`` and ``stem.safetensors``; returns the paths written."""
    tensors: dict[str, torch.Tensor] = {}
    structure = _encode(value, tensors, stem.name)
    json_path, tensor_path = stem.with_suffix(".json"), stem.with_suffix(".safetensors")
    json_path.write_text(json.dumps(structure))
    save_file(tensors, str(tensor_path))
    return [json_path, tensor_path]


def load_state(stem: Path) -> Any:
    """Read what :func:`save_state` wrote; a damaged file raises :class:`StateFormatError` naming it."""
    json_path, tensor_path = stem.with_suffix(".json"), stem.with_suffix(".safetensors")
    try:
        structure = json.loads(json_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise StateFormatError(f"{json_path}: unreadable ({err})") from None
    try:
        tensors = load_file(str(tensor_path))
    except Exception as err:  # safetensors raises its own error types for truncated or malformed files
        raise StateFormatError(f"{tensor_path}: unreadable ({err})") from None
    try:
        return _decode(structure, tensors, stem.name)
    except StateFormatError as err:
        raise StateFormatError(f"{json_path}: {err}") from None
    except (TypeError, KeyError, ValueError, IndexError, AttributeError) as err:  # a structure changed by damage
        raise StateFormatError(f"{json_path}: malformed ({type(err).__name__}: {err})") from None
