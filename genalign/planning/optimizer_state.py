"""Bytes of optimizer state per trainable parameter tensor, as each optimizer of ``optim.optimizer`` allocates it.

Every formula takes the tensor's LOCAL shape (its shard under FSDP) and dtype, and follows the optimizer's own
``step`` (torch 2.x, bitsandbytes 0.4x):

* ``adamw`` / ``adamw_fused``: ``exp_avg`` and ``exp_avg_sq``, each ``zeros_like(param)``: 2 x numel x itemsize
  (bfloat16 parameters get bfloat16 moments: genalign keeps no float32 master copy).
* ``adafactor`` (``torch.optim.Adafactor``, no first moment): a tensor with 2+ dimensions keeps a row and a column
  variance over its last two dimensions, ``prod(shape[:-1]) + prod(shape[:-2]) x shape[-1]`` elements; a vector keeps
  a full variance.
* ``sgd``: one ``momentum_buffer`` like the parameter when ``optim.momentum > 0``, nothing otherwise.
* ``adamw_8bit`` (``bitsandbytes.optim.AdamW8bit``, block-wise): tensors of at least 4096 elements keep two uint8
  moments plus one float32 absmax per block of 256 elements and moment; smaller ones keep two float32 moments.

The per-tensor step counters (a few bytes each) are left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

#: bitsandbytes: tensors smaller than this stay in 32-bit state; block size of the block-wise 8-bit state.
BNB_MIN_8BIT_SIZE = 4096
BNB_BLOCK = 256
FLOAT32_BYTES = 4


def tensor_state_bytes(shape: tuple[int, ...], dtype: torch.dtype, optimizer: str, *, momentum: float = 0.0) -> int:
    """Optimizer state bytes of one parameter tensor of ``shape`` (local shard) and ``dtype``."""
    numel = math.prod(shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    if optimizer in ("adamw", "adamw_fused"):
        return 2 * numel * itemsize
    if optimizer == "adafactor":
        if len(shape) < 2:
            return numel * itemsize
        rows = math.prod(shape[:-1])
        cols = math.prod(shape[:-2]) * shape[-1]
        return (rows + cols) * itemsize
    if optimizer == "sgd":
        return numel * itemsize if momentum > 0 else 0
    if optimizer == "adamw_8bit":
        if numel < BNB_MIN_8BIT_SIZE:
            return 2 * numel * FLOAT32_BYTES
        blocks = math.ceil(numel / BNB_BLOCK)
        return 2 * (numel + blocks * FLOAT32_BYTES)
    raise ValueError(f"optim.optimizer = {optimizer!r} has no memory formula; use adamw, adafactor, sgd or adamw_8bit.")


def optimizer_state_bytes(
    shapes_and_dtypes: Iterable[tuple[tuple[int, ...], torch.dtype]], optimizer: str, *, momentum: float = 0.0
) -> int:
    """Total state bytes over trainable tensors given as ``(local shape, dtype)``."""
    return sum(tensor_state_bytes(shape, dtype, optimizer, momentum=momentum) for shape, dtype in shapes_and_dtypes)


__all__ = ["optimizer_state_bytes", "tensor_state_bytes"]
