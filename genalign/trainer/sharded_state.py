"""Trainable weights, optimizer state and sharded policy state through ``torch.distributed.checkpoint`` (DCP).

Every process writes the shards it holds into ``train_state/*.safetensors`` (DCP's Hugging Face storage layout: each
file records the offsets of its tensors in the global tensors as JSON metadata), and any number of processes reads
them back, each taking the slices of its own layout: a run saved by N processes resumes with M (sharded or not).
Reading never unpickles: safetensors holds raw buffers, and the rest of the checkpoint is JSON.

Keys: ``param/<name>`` the trainable parameters (names of :func:`~genalign.trainer.optim.named_trainable_parameters`,
the same in every layout), ``optim/<name>/<key>`` the optimizer's tensors of that parameter (AdamW: ``exp_avg``,
``exp_avg_sq``, ``step``), ``policy_state/<path>`` the sharded tensors of ``Policy.state_dict()`` (e.g. an EMA of
sharded weights). The optimizer's hyper-parameters and every plain value go to JSON beside it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from genalign.trainer.distributed import is_sharded

SHARDED = "__sharded__"  # placeholder of a sharded tensor in the JSON part of a state


def split_sharded(state: Any, prefix: str = "policy_state") -> tuple[Any, dict[str, Tensor]]:
    """``state`` with every sharded tensor replaced by ``{SHARDED: key}``, and those tensors by key."""
    found: dict[str, Tensor] = {}

    def walk(value: Any, path: str) -> Any:
        if is_sharded(value):
            found[path] = value
            return {SHARDED: path}
        if isinstance(value, dict):
            return {k: walk(v, f"{path}/{k}") for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(walk(v, f"{path}/{i}") for i, v in enumerate(value))
        return value

    return walk(state, prefix), found


def sharded_placeholders(structure: Any, template: Any) -> dict[str, Tensor]:
    """For every ``{SHARDED: key}`` in a loaded structure, the tensor of ``template`` (the current state) at the same
    place, which DCP fills in this process's layout."""
    found: dict[str, Tensor] = {}

    def walk(value: Any, like: Any) -> None:
        if isinstance(value, dict) and set(value) == {SHARDED}:
            found[value[SHARDED]] = like
        elif isinstance(value, dict) and isinstance(like, dict):
            for k, v in value.items():
                walk(v, like.get(k))
        elif isinstance(value, list | tuple) and isinstance(like, list | tuple):
            for v, t in zip(value, like, strict=False):
                walk(v, t)

    walk(structure, template)
    return found


def merge_sharded(structure: Any, loaded: dict[str, Tensor], template: Any) -> Any:
    """Replace placeholders by the loaded tensors; plain tensors whose place in ``template`` is sharded (a checkpoint
    of an unsharded run) are sharded like the template."""
    if isinstance(structure, dict) and set(structure) == {SHARDED}:
        return loaded[structure[SHARDED]]
    if isinstance(structure, Tensor) and is_sharded(template):
        from torch.distributed.tensor import distribute_tensor

        return distribute_tensor(structure.to(template.dtype), template.device_mesh, template.placements)
    if isinstance(structure, dict):
        like = template if isinstance(template, dict) else {}
        return {k: merge_sharded(v, loaded, like.get(k)) for k, v in structure.items()}
    if isinstance(structure, list | tuple):
        like = template if isinstance(template, list | tuple) else []
        items = [merge_sharded(v, loaded, like[i] if i < len(like) else None) for i, v in enumerate(structure)]
        return type(structure)(items)
    return structure


def save_train_state(
    folder: Path,
    named_parameters: list[tuple[str, nn.Parameter]],
    optimizer: torch.optim.Optimizer,
    sharded_policy_state: dict[str, Tensor],
) -> None:
    """Write the trainable parameters, the optimizer's tensors and ``sharded_policy_state`` (collective: every
    process calls it with its shards). When a process fails to write (a full disk), every process raises that
    error (the lowest failing rank's; DCP gathers them)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    state: dict[str, Tensor] = {f"param/{name}": param.detach() for name, param in named_parameters}
    for name, param in named_parameters:
        for key, value in optimizer.state.get(param, {}).items():
            if isinstance(value, Tensor):
                state[f"optim/{name}/{key}"] = value
    state |= sharded_policy_state
    try:
        with _single_process_quietly():
            dcp.save(state, storage_writer=dcp.HuggingFaceStorageWriter(str(folder), save_distributed=True))
    except CheckpointException as err:  # a BaseException that hides the error (and its errno) of each process
        failed = [err.failures[rank][0] for rank in sorted(err.failures)]
        if failed and isinstance(failed[0], Exception):
            raise failed[0] from None
        raise


def optimizer_hyperparameters(
    optimizer: torch.optim.Optimizer, named_parameters: list[tuple[str, nn.Parameter]]
) -> dict[str, Any]:
    """The optimizer state besides its tensors: parameter groups (by parameter name) and plain per-parameter values."""
    names = {id(param): name for name, param in named_parameters}
    groups = [
        {**{k: v for k, v in group.items() if k != "params"}, "params": [names[id(p)] for p in group["params"]]}
        for group in optimizer.param_groups
    ]
    plain = {
        names[id(param)]: {k: v for k, v in values.items() if not isinstance(v, Tensor)}
        for param, values in optimizer.state.items()
    }
    return {"param_groups": groups, "plain_state": {k: v for k, v in plain.items() if v}}


def load_train_state(
    folder: Path,
    named_parameters: list[tuple[str, nn.Parameter]],
    optimizer: torch.optim.Optimizer,
    hyperparameters: dict[str, Any],
    sharded_policy_targets: dict[str, Tensor],
) -> dict[str, Tensor]:
    """Load what :func:`save_train_state` wrote into this process's parameters (in place) and optimizer, in this
    process's layout; returns the sharded policy-state tensors (filled into ``sharded_policy_targets``).

    Raises:
        ValueError: the checkpoint trains other parameters (names listed), or holds optimizer state this layout cannot
            take.
    """
    import torch.distributed.checkpoint as dcp

    saved = dcp.HuggingFaceStorageReader(str(folder)).read_metadata().state_dict_metadata
    params = dict(named_parameters)
    saved_params = {key[len("param/") :] for key in saved if key.startswith("param/")}
    if saved_params != set(params):
        missing, extra = sorted(set(params) - saved_params), sorted(saved_params - set(params))
        raise ValueError(
            f"the checkpoint trains other parameters than this policy (missing: {missing[:3]}, unexpected: "
            f"{extra[:3]}); was it written with other policy or LoRA options?"
        )
    state: dict[str, Tensor] = {f"param/{name}": param.detach() for name, param in named_parameters}
    optimizer_keys = {}
    for key, meta in saved.items():
        if key.startswith("optim/"):
            name, _, field = key[len("optim/") :].rpartition("/")
            state[key] = _empty_like_saved(params[name], meta, key)
            optimizer_keys[key] = (name, field)
    state |= sharded_policy_targets
    with _single_process_quietly():
        dcp.load(state, storage_reader=dcp.HuggingFaceStorageReader(str(folder)))
    optimizer_tensors = {key: state[key] for key in optimizer_keys}
    _restore_optimizer(optimizer, named_parameters, hyperparameters, optimizer_tensors, optimizer_keys)
    return {key: state[key] for key in sharded_policy_targets}


@contextmanager
def _single_process_quietly() -> Iterator[None]:
    """DCP warns on every call without a process group that it assumes one process: that is the intent here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def _empty_like_saved(param: nn.Parameter, meta: Any, key: str) -> Tensor:
    """A tensor to load the saved ``key`` into: laid out like ``param`` when it has the parameter's shape."""
    size, dtype = tuple(meta.size), meta.properties.dtype
    if size == tuple(param.shape):
        return torch.zeros_like(param.detach(), dtype=dtype)
    if is_sharded(param) and size:
        raise ValueError(
            f"{key}: optimizer state of shape {list(size)} for a sharded parameter of shape {list(param.shape)} "
            "cannot be resharded; use optim.optimizer=adamw (or sgd) with run.distributed=fsdp."
        )
    return torch.zeros(size, dtype=dtype)


def _restore_optimizer(optimizer, named_parameters, hyperparameters, tensors, keys) -> None:
    """``optimizer.load_state_dict`` with parameters numbered in the optimizer's own order (groups, then position)."""
    position = {id(p): i for i, p in enumerate(p for group in optimizer.param_groups for p in group["params"])}
    index = {name: position[id(param)] for name, param in named_parameters}
    per_param: dict[int, dict[str, Any]] = {}
    for key, (name, field) in keys.items():
        per_param.setdefault(index[name], {})[field] = tensors[key]
    for name, values in hyperparameters.get("plain_state", {}).items():
        per_param.setdefault(index[name], {}).update(values)
    groups = [{**g, "params": [index[n] for n in g["params"]]} for g in hyperparameters["param_groups"]]
    optimizer.load_state_dict({"state": per_param, "param_groups": groups})


__all__ = [
    "is_sharded",
    "load_train_state",
    "merge_sharded",
    "optimizer_hyperparameters",
    "save_train_state",
    "sharded_placeholders",
    "split_sharded",
]
