"""The few collective operations the trainer needs, written so that 1 process needs no process group.

Gradients are reduced by the data-parallel wrappers of :mod:`genalign.trainer.parallel`; these are the scalar and
batch collectives of the trainer (the global loss normaliser, the group statistics, lockstep counts, decisions that
every process must take alike).
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch import Tensor

#: the module that defines DTensor; a DTensor exists only once it is imported (``fully_shard`` imports it), so the
#: checks below read it from ``sys.modules`` instead of importing it (about a second of start-up for every process)
_DTENSOR_MODULE = "torch.distributed.tensor"


def is_sharded(tensor: object) -> bool:
    """Whether ``tensor`` is a DTensor (a parameter, gradient or optimizer state of a wrapped module)."""
    module = sys.modules.get(_DTENSOR_MODULE)
    return module is not None and isinstance(tensor, module.DTensor)


def local_part(tensor: Tensor) -> Tensor:
    """This process's shard of a DTensor, or the tensor itself."""
    return tensor.to_local() if is_sharded(tensor) else tensor


def full_value(tensor: Tensor) -> Tensor:
    """The whole value of a DTensor, gathered from every process (collective), or the tensor itself."""
    return tensor.full_tensor() if is_sharded(tensor) else tensor


def join_launched_processes(cpu: bool) -> None:
    """Join the process group that a launcher (``torchrun``, ``accelerate launch``) describes in the environment
    (``WORLD_SIZE > 1``): NCCL on GPUs (each process on its ``LOCAL_RANK`` device), gloo on CPUs."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return
    if torch.cuda.is_available() and not cpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl")
    else:
        dist.init_process_group("gloo")


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce_sum(tensor: Tensor) -> Tensor:
    if is_distributed():
        reduced = tensor.to(_collective_device(), copy=True)
        dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
        return reduced.to(tensor.device)
    return tensor


def all_gather_cat(tensor: Tensor) -> Tensor:
    """Concatenate ``[n_r, ...]`` tensors from all ranks along dim 0, in rank order (``n_r`` may differ)."""
    if not is_distributed():
        return tensor
    world, device = dist.get_world_size(), _collective_device()
    sizes = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([tensor.shape[0]], device=device))
    longest = int(max(s.item() for s in sizes))
    padded = torch.zeros((longest, *tensor.shape[1:]), dtype=tensor.dtype, device=device)
    padded[: tensor.shape[0]] = tensor
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat([part[: int(size.item())] for part, size in zip(parts, sizes)], dim=0).to(tensor.device)


def _collective_device() -> torch.device:
    """NCCL collectives need CUDA tensors; gloo takes CPU tensors."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_max(value: int) -> int:
    """The largest ``value`` over all processes."""
    if not is_distributed():
        return value
    tensor = torch.tensor([value], dtype=torch.long, device=_collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def all_true(flag: bool) -> bool:
    """Whether ``flag`` holds in every process (one collective decision, so processes never diverge)."""
    if not is_distributed():
        return flag
    tensor = torch.tensor([float(flag)], device=_collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return bool(tensor.item())


def sum_counters(counters: dict[str, float]) -> dict[str, float]:
    """Per-key sums of every process's counters (keys missing in a process count as 0), in sorted key order."""
    if not is_distributed():
        return counters
    gathered: list[dict[str, float]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(gathered, {k: float(v) for k, v in counters.items()})
    keys = sorted({k for part in gathered for k in part})
    return {k: sum(part.get(k, 0.0) for part in gathered) for k in keys}


def all_gather_object(value: object) -> list[object]:
    """Every process's ``value`` (picklable), in rank order; ``[value]`` for one process."""
    if not is_distributed():
        return [value]
    gathered: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def broadcast_object(value: object) -> object:
    """The main process's ``value`` (picklable), on every process."""
    if not is_distributed():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    """Wait for every process (a no-op for one process)."""
    if is_distributed():
        dist.barrier()


def rank_and_world() -> tuple[int, int]:
    if is_distributed():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
