"""What a family needs to know about sharded modules (:mod:`genalign.trainer.parallel` wraps them)."""

from __future__ import annotations

from torch import nn


def release_gathered(module: nn.Module) -> None:
    """Free the gathered copies of ``module``'s sharded parameters (a no-op without sharding): the next forward pass
    gathers the shards' current values again, and a frozen module holds only its shards between passes."""
    from torch.distributed.fsdp import FSDPModule

    for sub in module.modules():
        if isinstance(sub, FSDPModule):
            sub.reshard()


__all__ = ["release_gathered"]
