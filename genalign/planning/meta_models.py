"""Models built on the ``meta`` device from their configs: every parameter has its real shape and dtype, no memory.

Parameter counts come from these modules (``sum(p.numel())``), so they are exact for the architecture, including
tied embeddings (counted once), biases, norms and LoRA adapters added the way the policy adds them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import nn

from genalign.planning.architectures import ComponentSpec


def build_on_meta(spec: ComponentSpec, dtype: torch.dtype) -> nn.Module:
    """``spec``'s model on the meta device, parameters and buffers in ``dtype`` (integer buffers keep theirs)."""
    import importlib

    from accelerate import init_empty_weights

    if spec.library not in ("transformers", "diffusers", "open_clip"):
        raise ValueError(f"cannot build a {spec.library!r} model ({spec.class_name}); use transformers or diffusers.")
    library = importlib.import_module(spec.library)  # before _quiet: a first import resets the library's log level
    with init_empty_weights(include_buffers=True), _quiet():
        if spec.library == "transformers":
            return _transformers_model(spec, dtype)
        if spec.library == "diffusers":
            return _cast_like_from_pretrained(getattr(library, spec.class_name).from_config(spec.config), dtype)
        return library.create_model(spec.class_name, pretrained=None, device="meta").to(dtype)


def _cast_like_from_pretrained(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """``module`` in ``dtype`` except the submodules diffusers keeps in float32 (``_keep_in_fp32_modules``), as
    ``from_pretrained(torch_dtype=dtype)`` loads it."""
    module.to(dtype)
    keep = getattr(module, "_keep_in_fp32_modules", None) or []
    for name, param in module.named_parameters():
        if any(part in keep for part in name.split(".")):
            param.data = param.data.to(torch.float32)
    return module


def _transformers_model(spec: ComponentSpec, dtype: torch.dtype) -> nn.Module:
    import transformers

    fields = {k: v for k, v in spec.config.items() if k not in ("architectures", "auto_map")}
    config = transformers.AutoConfig.for_model(**fields)
    model_class = getattr(transformers, spec.class_name, None) if spec.class_name else None
    if model_class is None:
        raise ValueError(
            f"transformers has no model class {spec.class_name!r} (from the config's 'architectures'); give the "
            "folder of a model that transformers can build."
        )
    return model_class._from_config(config, dtype=dtype)


class _quiet:
    """Silence the library loggers while building (warnings about unused config keys say nothing here)."""

    names = ("transformers", "diffusers", "")  # "": the root logger (open_clip warns there)

    def __enter__(self):
        self.levels = [logging.getLogger(n).level for n in self.names]
        for name in self.names:
            logging.getLogger(name).setLevel(logging.ERROR)

    def __exit__(self, *exc):
        for name, level in zip(self.names, self.levels, strict=True):
            logging.getLogger(name).setLevel(level)


@dataclass(frozen=True)
class ParameterCount:
    """Elements and bytes of a module's parameters (tied tensors once), split by ``requires_grad``.

    Attributes:
        total, trainable: element counts; total_bytes, trainable_bytes: the same in bytes of each tensor's dtype.
    """

    total: int
    trainable: int
    total_bytes: int
    trainable_bytes: int

    @property
    def frozen(self) -> int:
        return self.total - self.trainable


def count_parameters(module: nn.Module) -> ParameterCount:
    """Exact counts of ``module``'s parameters (``named_parameters`` de-duplicates tied weights)."""
    params = list(module.parameters())
    trainable = [p for p in params if p.requires_grad]
    return ParameterCount(
        total=sum(p.numel() for p in params),
        trainable=sum(p.numel() for p in trainable),
        total_bytes=sum(p.numel() * p.element_size() for p in params),
        trainable_bytes=sum(p.numel() * p.element_size() for p in trainable),
    )


def blocks_of(module: nn.Module) -> list[nn.Module]:
    """The transformer blocks of ``module``, exactly the units that sharded training wraps
    (:func:`genalign.trainer.parallel.sharding_units`: the outermost submodules named in some ``_no_split_modules``)."""
    from genalign.trainer.parallel import sharding_units

    return sharding_units(module)


__all__ = ["ParameterCount", "blocks_of", "build_on_meta", "count_parameters"]
