"""Peak memory of a computation, measured by running it on the ``meta`` device (shapes and dtypes, no data).

:class:`LiveBytes` is a ``TorchDispatchMode`` that sees every tensor an operator returns, in forward and in backward
(autograd runs the backward operators through the same dispatcher). It counts each new storage's bytes from the moment
it is created until the storage is freed (a ``weakref`` finalizer on the storage fires when the last tensor, saved
activation or view holding it dies), so ``peak`` is the largest number of bytes alive at once: activations saved for
backward, temporaries, gradients of activations. Storages alive before the trace (parameters, pre-allocated gradients,
inputs) are not counted, so the figure is what the computation adds on top of them.

Attention runs through :func:`flash_attention_stand_in` (installed by :func:`trace_peak`): the memory that fused
attention kernels (FlashAttention, PyTorch's efficient/flash SDPA and the CPU flash kernel) keep -- ``q, k, v``, the
output and one float32 log-sum-exp per query and head -- without the ``[S, S]`` score matrix that the math fallback
materialises. The meta device would otherwise pick the math fallback and overstate long sequences by far.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from genalign.planning.known_fills import KnownFills


class LiveBytes(TorchDispatchMode):
    """Counts the bytes of storages created while it is active, from creation until they are freed.

    Args:
        ignore: storages (``untyped_storage()._cdata``) that exist already and must not be counted.

    Attributes:
        live: bytes alive now; peak: the largest value ``live`` reached.
    """

    def __init__(self, ignore: set[int] | None = None) -> None:
        super().__init__()
        self.ignore = set(ignore or ())
        self.sizes: dict[int, int] = {}
        self.live = 0
        self.peak = 0

    def _free(self, key: int) -> None:
        self.live -= self.sizes.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in tree_leaves(out):
            if not isinstance(value, torch.Tensor):
                continue
            storage = value.untyped_storage()
            key = storage._cdata
            if key in self.sizes or key in self.ignore:
                continue
            self.sizes[key] = storage.nbytes()
            self.live += storage.nbytes()
            weakref.finalize(storage, self._free, key)
        self.peak = max(self.peak, self.live)
        return out


class _FusedAttention(torch.autograd.Function):
    """Shapes of a fused attention kernel: saves ``q, k, v``, the output and a float32 log-sum-exp per query."""

    @staticmethod
    def forward(ctx, query, key, value):
        out = query.new_empty(*query.shape[:-1], value.shape[-1])  # [B, heads, Sq, Dv]
        lse = torch.empty(query.shape[:-1], dtype=torch.float32, device=query.device)  # [B, heads, Sq]
        ctx.save_for_backward(query, key, value, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value, _, _ = ctx.saved_tensors
        return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)


def flash_attention_stand_in(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **_):
    """``F.scaled_dot_product_attention`` with the memory of a fused kernel (module docstring); meta tensors only.

    Args:
        query: ``[B, heads, Sq, D]``; key, value: ``[B, kv_heads, Sk, D]`` (grouped-query attention keeps the
            smaller key/value heads, as fused kernels do).
    """
    del attn_mask, dropout_p, is_causal, scale
    if query.device.type != "meta":
        raise RuntimeError("flash_attention_stand_in computes no values; it only runs on the meta device.")
    return _FusedAttention.apply(query, key, value)


@contextmanager
def fused_attention_on_meta() -> Iterator[None]:
    """Inside the block ``F.scaled_dot_product_attention`` is :func:`flash_attention_stand_in`."""
    original = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = flash_attention_stand_in
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


@dataclass(frozen=True)
class TracedPeak:
    """What one traced computation adds to memory, in bytes.

    Attributes:
        peak: the most bytes alive at once during the computation.
        kept: bytes alive after its forward stage (activations saved for backward, or what a no-grad pass leaves).
    """

    peak: int
    kept: int

    @staticmethod
    def zero() -> TracedPeak:
        return TracedPeak(0, 0)


def storage_keys(tensors) -> set[int]:
    """Storage keys of ``tensors`` (to leave them out of a trace)."""
    return {t.untyped_storage()._cdata for t in tensors if isinstance(t, torch.Tensor)}


def trace_peak(forward: Callable[[], object], *, existing: set[int] | None = None, backward: bool = True) -> TracedPeak:
    """Run ``forward()`` on meta tensors, then ``backward()`` on what it returns (a scalar loss) when ``backward``, and
    return the bytes the computation added at its peak and after the forward stage. Values of constant fills are
    followed (:class:`~genalign.planning.known_fills.KnownFills`), so the model may branch or index on them.

    Args:
        forward: builds its inputs and runs the forward stage; without ``backward`` it runs under ``no_grad``.
        existing: storages alive before (parameters, gradients) that are not counted.
    """
    with fused_attention_on_meta(), LiveBytes(existing) as tracker, KnownFills():
        if backward:
            loss = forward()
            kept = tracker.live
            loss.backward()
        else:
            with torch.no_grad():
                loss = forward()
            kept = tracker.live
        del loss
    return TracedPeak(peak=tracker.peak, kept=kept)


__all__ = [
    "LiveBytes",
    "TracedPeak",
    "flash_attention_stand_in",
    "fused_attention_on_meta",
    "storage_keys",
    "trace_peak",
]
