"""The few collective operations the trainer needs, written so that 1 process needs no process group.

Gradients are all-reduced by SUM because every micro-batch loss is already divided by the GLOBAL normaliser
(summed over micro-batches and ranks): the sum of per-rank gradients is then exactly the full-batch gradient.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn


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


def rank_and_world() -> tuple[int, int]:
    if is_distributed():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def sum_gradients(parameters: list[nn.Parameter]) -> None:
    """All-reduce (SUM) the gradients of ``parameters`` in one flat buffer."""
    if not is_distributed():
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p, g in zip(parameters, grads):
        n = g.numel()
        p.grad = flat[offset : offset + n].view_as(g).clone()
        offset += n
