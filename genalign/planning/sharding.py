"""How ``run.distributed`` / ``run.fsdp`` place the trained modules on ``gpus`` processes, in the planner's terms.

Semantics of :mod:`genalign.trainer.parallel` (torch FSDP2, every transformer block one unit, the module itself the
root unit):

* ``none``: one process holds everything (more GPUs are refused by the trainer).
* ``ddp``: FSDP2 over a replicate-only mesh: every process holds the whole model, gradients and optimizer state.
* ``fsdp``: parameters, gradients and optimizer state of the sharded modules are split along dim 0 across a shard
  group of ``run.fsdp.shard_size`` processes (0: all), each process holding ``ceil(dim0 / group)`` rows per tensor
  (FSDP2 pads to equal shards); hybrid sharding replicates across groups.
* ``auto``: ``none`` for one GPU, else ``ddp`` (the trainer also picks ``fsdp`` when ``accelerate`` is configured for
  it, which the planner cannot see; pass ``run.distributed=fsdp`` to plan that).

Working set of sharded training (``ddp`` included, FSDP2 allocates the same all-gather buffers):

* update: roots keep their gathered parameters from forward until their backward ends (their non-block parameters:
  embeddings, output head, final norms); with ``reshard_after_forward`` two blocks are gathered at a time (the one
  computing and the one prefetched), without it every block stays gathered after forward (ZeRO-2); the unsharded
  gradients of two blocks wait for their reduce-scatter.
* rollout: sampling runs inside ``DataParallel.full_parameters()``: every unit is gathered at once.

All gathered copies are in the compute dtype (``run.fsdp.param_dtype``, else the stored dtype).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from torch import nn

Strategy = Literal["none", "ddp", "fsdp"]
#: blocks whose parameters (and unsharded gradients) are gathered at once with reshard_after_forward: compute + prefetch
GATHERED_BLOCKS = 2


@dataclass(frozen=True)
class ShardLayout:
    """The data-parallel layout of a planned run.

    Attributes:
        strategy: ``none``, ``ddp`` or ``fsdp`` (``auto`` resolved).
        gpus: processes in all; group: processes one sharded tensor is split across (1 for none / ddp).
        reshard_after_forward: ``run.fsdp.reshard_after_forward``; cpu_offload: ``run.fsdp.cpu_offload``.
    """

    strategy: Strategy
    gpus: int
    group: int
    reshard_after_forward: bool = True
    cpu_offload: bool = False

    @property
    def sharded(self) -> bool:
        """Whether the trained modules are FSDP2-wrapped (``ddp`` and ``fsdp``)."""
        return self.strategy != "none"

    def local_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """This process's share of a sharded tensor of ``shape`` (dim 0 split into ``group`` padded rows)."""
        if not shape or self.group == 1:
            return shape
        return (math.ceil(shape[0] / self.group), *shape[1:])

    def local_numel(self, shape: tuple[int, ...]) -> int:
        return math.prod(self.local_shape(shape))


def resolve_layout(distributed: str, gpus: int, *, shard_size: int, reshard_after_forward: bool,
                   cpu_offload: bool) -> ShardLayout:  # fmt: skip
    """The layout of ``run.distributed`` on ``gpus`` processes.

    Raises:
        ValueError: ``none`` with several GPUs, or a ``shard_size`` that does not divide ``gpus`` (the trainer refuses
            both), naming the field and the fix.
    """
    strategy = distributed if distributed != "auto" else ("none" if gpus == 1 else "ddp")
    if strategy == "none" and gpus > 1:
        raise ValueError(
            f"run.distributed = 'none' with {gpus} GPUs would train {gpus} unrelated copies; use 'ddp' or 'fsdp'."
        )
    group = 1
    if strategy == "fsdp":
        group = gpus if shard_size in (0, gpus) else shard_size
        if gpus % group:
            raise ValueError(
                f"run.fsdp.shard_size = {shard_size} does not divide {gpus} GPUs; use a divisor (e.g. GPUs per node) "
                "or 0 to shard across all of them."
            )
    return ShardLayout(strategy, gpus, group, reshard_after_forward, cpu_offload)  # type: ignore[arg-type]


def parameter_bytes(module: nn.Module, layout: ShardLayout, *, trainable_only: bool = False) -> int:
    """Bytes this process holds of ``module``'s parameters (their own dtypes), sharded by ``layout``."""
    params = [p for p in module.parameters() if p.requires_grad or not trainable_only]
    return sum(layout.local_numel(tuple(p.shape)) * p.element_size() for p in params)


__all__ = ["GATHERED_BLOCKS", "ShardLayout", "Strategy", "parameter_bytes", "resolve_layout"]
