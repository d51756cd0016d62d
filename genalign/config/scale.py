"""How a run is spread over machines: FSDP2 sharding options (``run.fsdp``) and the hardware a config is sized for
(``hardware``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from genalign.config.core import ConfigError


def _help(text: str, default: Any = None):
    return field(default=default, metadata={"help": text})


@dataclass
class FSDPConfig:
    """How ``run.distributed: fsdp`` shards the trained modules (torch FSDP2, one unit per transformer block)."""

    param_dtype: Literal["float32", "bfloat16", "float16"] | None = _help(
        "Dtype the sharded parameters are gathered in for forward and backward (mixed precision); null keeps the "
        "parameters' own dtype.",
    )
    reduce_dtype: Literal["float32", "bfloat16"] = _help("Dtype gradients are reduced in.", "float32")
    cpu_offload: bool = _help("Keep sharded parameters, gradients and optimizer state in CPU memory (GPU runs).", False)
    reshard_after_forward: bool = _help(
        "Free each block's gathered parameters after its forward (ZeRO-3; false keeps them until backward: ZeRO-2).",
        True,
    )
    shard_size: int = _help(
        "Processes per shard group: 0 shards across all processes; k > 0 shards within groups of k consecutive "
        "processes and replicates across groups (hybrid sharding, e.g. k = GPUs per node).",
        0,
    )

    def validate(self) -> None:
        if self.shard_size < 0:
            raise ConfigError(f"run.fsdp.shard_size = {self.shard_size} must be >= 0 (0 = all processes).")


@dataclass
class HardwareConfig:
    """The machines a config is meant for (presets state theirs); null fields mean "not stated"."""

    gpus: int | None = _help("GPUs (training processes) in total, over all nodes.")
    gpu_memory_gb: float | None = _help("Memory of each GPU in GB (e.g. 80 for an H100 80GB).")
    nodes: int = _help("Machines the GPUs are spread over.", 1)

    def validate(self) -> None:
        for name in ("gpus", "gpu_memory_gb"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"hardware.{name} = {value} must be > 0 (or null when not stated).")
        if self.nodes < 1:
            raise ConfigError(f"hardware.nodes = {self.nodes} must be >= 1.")


__all__ = ["FSDPConfig", "HardwareConfig"]
