"""Statistics of earlier steps for credit rules: an exponential moving average with the state protocol, and the mean
over every process's batch (a credit rule sees one process's batch; a running statistic must not differ between
processes)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor


def global_sum(values: Tensor) -> Tensor:
    """``[...]`` float64 ``values`` ``[...]`` summed over every process (this process's when no process group runs)."""
    total = values.double()
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
        moved = total.to(device)
        dist.all_reduce(moved)
        total = moved.cpu()
    return total


def global_mean(values: Tensor) -> Tensor:
    """``[...]`` the mean over the rows of ``values`` ``[n, ...]`` of every process (the rows of this process when no
    process group is running); zeros when no process has a row."""
    values = values.double()
    count = torch.tensor([float(values.shape[0])], dtype=torch.float64)
    total = global_sum(torch.cat([values.sum(0).reshape(-1), count]))
    count = total[-1]
    return (total[:-1] / count.clamp_min(1.0)).reshape(values.shape[1:])


class RunningMean:
    """An exponential moving average ``m ← momentum·m + (1 − momentum)·x`` of ``size`` numbers, seeded by the first
    value it sees (the one state protocol: ``state_dict`` / ``load_state_dict``)."""

    def __init__(self, *, size: int, momentum: float) -> None:
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum={momentum!r} must be in [0, 1) (the weight of the earlier average, e.g. 0.9)")
        self.size = size
        self.momentum = momentum
        self.mean: Tensor | None = None  # [size] float64
        self.updates = 0

    def value(self) -> Tensor | None:
        """``[size]`` the average of the values seen so far, or None before the first update."""
        return None if self.mean is None else self.mean.clone()

    def update(self, value: Tensor) -> None:
        """Fold ``value`` ``[size]`` into the average."""
        value = value.detach().double().reshape(self.size).cpu()
        self.mean = value.clone() if self.mean is None else self.momentum * self.mean + (1 - self.momentum) * value
        self.updates += 1

    def state_dict(self) -> dict[str, Any]:
        return {"mean": None if self.mean is None else self.mean.tolist(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mean = state["mean"]
        self.mean = None if mean is None else torch.tensor(mean, dtype=torch.float64)
        self.updates = int(state["updates"])


__all__ = ["RunningMean", "global_mean", "global_sum"]
