"""Values of constant-filled ``meta`` tensors, so that a traced model may branch on them or index with them.

The meta device has shapes but no values, so ``if torch.all(x == 0):`` (``Tensor.item()``) and boolean-mask indexing
``x[mask]`` (whose result shape depends on the mask's values) fail on it. The inputs the planner makes are constant
fills (``torch.zeros`` prompt embeddings, masks and latents), and a model branches or indexes on values computed
from them -- HunyuanVideo 1.5 tests ``torch.all(image_embeds == 0)`` and gathers its valid text tokens with the prompt
masks -- so :class:`KnownFills`, a ``TorchDispatchMode``, follows constant fills through the operators that keep a
tensor constant and answers those two questions from them:

* a storage filled with one value (``zeros``, ``ones``, ``full``, ``new_*``, ``*_like``, ``fill_``, ``zero_``, a full
  ``copy_`` of a constant) holds that value; every view of it (slices, ``unbind``, ``expand``, reshapes) shares the
  storage and so the value; a partial in-place write forgets it;
* element-wise operators (:data:`ELEMENTWISE`) of constants are evaluated once on 0-d stand-ins, ``all`` / ``any`` and
  copies keep the value, ``cat`` / ``stack`` of one value keep it;
* ``Tensor.item()`` of a constant returns the value; ``nonzero`` and boolean indexing with a constant mask select all
  elements (true) or none (false).

Anything else asked of a value the mode does not know raises an error naming the operator.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

aten = torch.ops.aten

#: Creation operators: the fill value from the arguments.
_FILLS = {
    aten.zeros.default: lambda args, kwargs: 0,
    aten.ones.default: lambda args, kwargs: 1,
    aten.full.default: lambda args, kwargs: args[1],
    aten.new_zeros.default: lambda args, kwargs: 0,
    aten.new_ones.default: lambda args, kwargs: 1,
    aten.new_full.default: lambda args, kwargs: args[2],
    aten.zeros_like.default: lambda args, kwargs: 0,
    aten.ones_like.default: lambda args, kwargs: 1,
    aten.full_like.default: lambda args, kwargs: args[1],
    aten.scalar_tensor.default: lambda args, kwargs: args[0],
}
#: In-place fills of their first argument.
_INPLACE_FILLS = {
    aten.zero_.default: lambda args: 0,
    aten.fill_.Scalar: lambda args: args[1],
}
#: Element-wise operators whose result on constant inputs is constant, evaluated on 0-d stand-ins.
ELEMENTWISE = {
    aten.eq.Scalar, aten.eq.Tensor, aten.ne.Scalar, aten.ne.Tensor, aten.lt.Scalar, aten.lt.Tensor,
    aten.le.Scalar, aten.le.Tensor, aten.gt.Scalar, aten.gt.Tensor, aten.ge.Scalar, aten.ge.Tensor,
    aten.bitwise_not.default, aten.logical_not.default, aten.bitwise_and.Tensor, aten.bitwise_or.Tensor,
    aten.logical_and.default, aten.logical_or.default, aten.mul.Tensor, aten.mul.Scalar, aten.add.Tensor,
    aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar, aten.neg.default, aten._to_copy.default, aten.clone.default,
    aten.all.default, aten.any.default, aten.all.dim, aten.any.dim, aten.repeat.default,
}  # fmt: skip
#: Operators taking a list of tensors first that keep a value all of them share.
_JOINS = {aten.cat.default, aten.stack.default}


def _key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage()._cdata


def _covers_storage(tensor: torch.Tensor) -> bool:
    return tensor.numel() * tensor.element_size() == tensor.untyped_storage().nbytes()


class KnownFills(TorchDispatchMode):
    """Tracks which meta storages hold one value (module docstring); ``values``: storage key -> the value."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[int, Any] = {}

    # ------------------------------------------------------------------------------ bookkeeping
    def value(self, tensor: torch.Tensor) -> Any:
        """The value every element of ``tensor`` holds, or None when it is not known."""
        return self.values.get(_key(tensor))

    def _set(self, tensor: torch.Tensor, value: Any) -> None:
        if tensor.device.type != "meta":
            return
        key = _key(tensor)
        if key not in self.values:
            weakref.finalize(tensor.untyped_storage(), self.values.pop, key, None)
        self.values[key] = torch.tensor(value).to(tensor.dtype).item()  # the value as the dtype holds it

    def _forget_writes(self, func, args, kwargs) -> None:
        """Forget the storages ``func`` writes into (its mutable arguments and ``out=``)."""
        bound = list(args) + [kwargs.get(a.name) for a in func._schema.arguments[len(args) :]]
        for argument, value in zip(func._schema.arguments, bound, strict=False):
            if argument.alias_info is not None and argument.alias_info.is_write:
                for tensor in tree_leaves(value):
                    if isinstance(tensor, torch.Tensor):
                        self.values.pop(_key(tensor), None)

    # ------------------------------------------------------------------------------ answers from known values
    def _scalar(self, tensor: torch.Tensor) -> Any:
        value = self.value(tensor)
        if value is None:
            raise RuntimeError(
                "Tensor.item() on a meta tensor whose value the planner does not know: the model branches on a value "
                "that is not a constant fill of its inputs; the planner cannot trace it."
            )
        return value

    def _true_indices(self, mask: torch.Tensor) -> torch.Tensor:
        """``nonzero(mask)`` ``[n, mask.dim()]`` on meta: every element when the mask is true, none when false."""
        value = self.value(mask)
        if value is None:
            raise RuntimeError(
                f"nonzero / boolean indexing with a meta mask of shape {tuple(mask.shape)} whose values the planner "
                "does not know (not a constant fill of the inputs); the planner cannot trace it."
            )
        rows = mask.numel() if value else 0
        return torch.empty(rows, mask.dim(), dtype=torch.long, device=mask.device)

    def _index(self, func, args, kwargs):
        source, indices = args[0], list(args[1])
        unrolled: list[torch.Tensor | None] = []
        for index in indices:
            if isinstance(index, torch.Tensor) and index.dtype == torch.bool:
                positions = self._true_indices(index)
                unrolled += list(positions.unbind(1))  # one long index per mask dimension
            else:
                unrolled.append(index)
        out = func(source, unrolled, *args[2:], **kwargs)
        source_value = self.value(source)
        if source_value is not None:
            self._set(out, source_value)
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten._local_scalar_dense.default:
            return self._scalar(args[0])
        if func is aten.nonzero.default:
            return self._true_indices(args[0])
        if func is aten.index.Tensor and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1]):
            return self._index(func, args, kwargs)
        out = func(*args, **kwargs)
        if func in _INPLACE_FILLS:
            if _covers_storage(args[0]):
                self._set(args[0], _INPLACE_FILLS[func](args))
            else:
                self.values.pop(_key(args[0]), None)
            return out
        if func is aten.copy_.default:
            source_value = self.value(args[1]) if isinstance(args[1], torch.Tensor) else None
            if source_value is not None and _covers_storage(args[0]):
                self._set(args[0], source_value)
            else:
                self.values.pop(_key(args[0]), None)
            return out
        self._forget_writes(func, args, kwargs)
        if not isinstance(out, torch.Tensor):
            return out
        if func in _FILLS:
            self._set(out, _FILLS[func](args, kwargs))
        elif func in ELEMENTWISE:
            self._elementwise(func, args, kwargs, out)
        elif func in _JOINS:
            values = {self.value(t) for t in args[0]}
            if len(values) == 1 and None not in values:
                self._set(out, values.pop())
        return out

    def _elementwise(self, func, args, kwargs, out: torch.Tensor) -> None:
        """Record ``out``'s value when every tensor argument's value is known: ``func`` on 0-d CPU stand-ins."""

        def stand_in(value):
            if not isinstance(value, torch.Tensor):
                return value
            known = self.value(value)
            if known is None:
                raise LookupError
            return torch.tensor(known, dtype=value.dtype)

        try:
            stand_args = [stand_in(a) for a in args]
            stand_kwargs = {k: stand_in(v) for k, v in kwargs.items() if k != "device"}
        except LookupError:
            return
        if func in (aten.all.default, aten.any.default, aten.all.dim, aten.any.dim) and args[0].numel() == 0:
            return  # vacuous: no element holds the value
        if func is aten.repeat.default:
            stand_args[1] = [1] * stand_args[0].dim()
        elif func in (aten.all.dim, aten.any.dim):
            stand_args = stand_args[:1]
            func = aten.all.default if func is aten.all.dim else aten.any.default
        with torch.device("cpu"):
            result = func(*stand_args, **stand_kwargs)
        self._set(out, result.item())


__all__ = ["ELEMENTWISE", "KnownFills"]
