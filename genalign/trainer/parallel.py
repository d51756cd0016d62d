"""Data parallelism for every family through torch's FSDP2 (``torch.distributed.fsdp.fully_shard``).

``run.distributed`` picks the strategy:

* ``none``: one process.
* ``fsdp``: parameters, gradients and optimizer state sharded across the processes (ZeRO-3); with
  ``run.fsdp.shard_size = k`` sharded within groups of ``k`` processes and replicated across groups (hybrid sharding,
  e.g. ``k`` = GPUs per node).
* ``ddp``: every process keeps the whole model and gradients are all-reduced: FSDP2 over a replicate-only device mesh
  (hybrid sharding with shard groups of one process), which is torch's composable replacement of
  ``DistributedDataParallel``. One code path (hooks, checkpoints, lockstep rules) serves both strategies.

What is wrapped: each module of :meth:`Policy.modules_to_shard` (the trained modules and frozen copies worth sharding,
such as a full reference model) becomes one FSDP root, and every transformer block inside it (the classes its
``_no_split_modules`` names: decoder layers, DiT / MMDiT blocks, vision blocks) one unit, so at most one block's
parameters are gathered at a time. Frozen parts that are not trained (VAE, text encoders, reward models) stay plain,
replicated modules. Roots keep their gathered parameters after forward (their output head is read again by the chunked
log-prob pass, and backward needs them first anyway).

Gradients are SUMMED across processes (divide factor 1): every micro-batch loss is already divided by the global
normaliser, summed over micro-batches and processes, so the sum is exactly the full-batch gradient and the update does
not depend on the number of processes (the invariance the tests check, within float32 rounding).

Rules every family keeps under sharding (checked by the multi-process tests):

* Scoring calls the root module (so its hooks gather the root's parameters), never a submodule alone.
* Every process makes the same number of scoring passes (the update pads with zero-weight micro-batches).
* Sampling and evaluation run inside :meth:`DataParallel.full_parameters`: every unit is gathered once, so sampling
  makes no collective call and processes may stop generating at different lengths.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn

from genalign.config.scale import FSDPConfig
from genalign.trainer.distributed import is_sharded

Strategy = Literal["none", "ddp", "fsdp"]
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_strategy(requested: str, world: int) -> Strategy:
    """The strategy of ``run.distributed`` for ``world`` processes (``auto``: module docstring)."""
    if requested == "auto":
        if world == 1:
            return "none"
        return "fsdp" if _accelerate_flag("ACCELERATE_USE_FSDP") else "ddp"
    if requested == "none" and world > 1:
        raise ValueError(
            f"run.distributed = 'none' with {world} processes would train {world} unrelated copies; use 'ddp' or "
            "'fsdp' (or 'auto'), or launch one process."
        )
    if _accelerate_flag("ACCELERATE_USE_DEEPSPEED"):
        raise ValueError(
            "accelerate is configured for DeepSpeed, which genalign does not drive; run `accelerate config` without "
            "DeepSpeed and set run.distributed = 'fsdp' (FSDP2 shards like ZeRO-3)."
        )
    return requested  # type: ignore[return-value]


def resolve_mixed_precision(requested: str) -> str:
    """The autocast precision: ``run.mixed_precision``, or for ``auto`` the one ``accelerate launch
    --mixed_precision`` (or the accelerate config) passes in ``ACCELERATE_MIXED_PRECISION``, else ``no``.

    Raises:
        ValueError: the config and the launcher ask for different precisions.
    """
    launcher = os.environ.get("ACCELERATE_MIXED_PRECISION")
    if requested == "auto":
        return launcher or "no"
    if launcher and launcher != requested:
        raise ValueError(
            f"run.mixed_precision = {requested!r} but accelerate launch asks for {launcher!r}; set one of them "
            "(run.mixed_precision = auto follows the launcher)."
        )
    return requested


def _accelerate_flag(name: str) -> bool:
    return os.environ.get(name, "false").lower() in ("1", "true", "yes")


def block_classes(module: nn.Module) -> set[str]:
    """Class names of the transformer blocks in ``module``: the union of every submodule's ``_no_split_modules``
    (the transformers / diffusers declaration of the blocks that must not be split across devices)."""
    names: set[str] = set()
    for sub in module.modules():
        names.update(getattr(sub, "_no_split_modules", None) or ())
    return names


def sharding_units(module: nn.Module) -> list[nn.Module]:
    """The blocks of ``module`` that become FSDP units, outermost first (nested blocks are left to their parent).

    A block holding a tied parameter (registered more than once, e.g. word embeddings shared with the output head) is
    left to the root: a parameter must live in exactly one unit."""
    classes = block_classes(module)
    counts: dict[int, int] = {}
    for _, param in module.named_parameters(remove_duplicate=False):
        counts[id(param)] = counts.get(id(param), 0) + 1
    units: list[nn.Module] = []
    inside: set[int] = set()
    for sub in module.modules():
        if sub is module or id(sub) in inside or type(sub).__name__ not in classes:
            continue
        if any(counts[id(p)] > 1 for p in sub.parameters()):
            continue
        units.append(sub)
        inside.update(id(m) for m in sub.modules())
    return units


def _mesh(strategy: Strategy, world: int, shard_size: int, device_type: str):
    from torch.distributed.device_mesh import init_device_mesh

    if strategy == "ddp":
        return init_device_mesh(device_type, (world, 1), mesh_dim_names=("replicate", "shard"))
    if shard_size in (0, world):
        return init_device_mesh(device_type, (world,), mesh_dim_names=("shard",))
    if world % shard_size:
        raise ValueError(
            f"run.fsdp.shard_size = {shard_size} does not divide the {world} processes; use a divisor of {world} "
            "(e.g. the GPUs per node) or 0 to shard across all processes."
        )
    return init_device_mesh(device_type, (world // shard_size, shard_size), mesh_dim_names=("replicate", "shard"))


@dataclass
class DataParallel:
    """The data-parallel layout of one run: the strategy, this process's rank and the FSDP roots it wrapped."""

    strategy: Strategy = "none"
    rank: int = 0
    world: int = 1
    roots: list[nn.Module] = field(default_factory=list)
    reshard_after_forward: bool = True

    @property
    def sharded(self) -> bool:
        """Whether modules are wrapped (parameters are DTensors and processes run forward passes in lockstep)."""
        return bool(self.roots)

    @classmethod
    def build(cls, policy, strategy: Strategy, fsdp: FSDPConfig, device: torch.device) -> DataParallel:
        """Wrap the modules ``policy.prepare_sharding`` hands over for ``strategy`` (nothing for ``none``)."""
        if strategy == "none":
            return cls()
        from torch.distributed.fsdp import (
            CPUOffloadPolicy,
            MixedPrecisionPolicy,
            OffloadPolicy,
            fully_shard,
            register_fsdp_forward_method,
        )

        layout = cls(strategy, dist.get_rank(), dist.get_world_size(), [], fsdp.reshard_after_forward)
        mesh = _mesh(strategy, layout.world, fsdp.shard_size, device.type)
        options = {
            "mesh": mesh,
            "mp_policy": MixedPrecisionPolicy(
                param_dtype=_DTYPES[fsdp.param_dtype] if fsdp.param_dtype else None,
                reduce_dtype=_DTYPES[fsdp.reduce_dtype],
            ),
            "offload_policy": CPUOffloadPolicy() if fsdp.cpu_offload and device.type != "cpu" else OffloadPolicy(),
        }

        def wrap(root: nn.Module) -> None:
            for unit in sharding_units(root):
                fully_shard(unit, reshard_after_forward=fsdp.reshard_after_forward, **options)
            fully_shard(root, reshard_after_forward=False, **options)
            if callable(getattr(root, "generate", None)):  # generate() runs the root's hooks like forward()
                register_fsdp_forward_method(root, "generate")
            for module in _fsdp_modules(root):
                module.set_gradient_divide_factor(1.0)  # sum: each loss is already divided by the global normaliser
                module.set_force_sum_reduction_for_comms(True)  # plain SUM collectives (gloo has no scaled sum)
            layout.roots.append(root)

        policy.prepare_sharding(wrap)
        _check_covered(policy, layout.roots)
        return layout

    def _gathered_modules(self) -> list[nn.Module]:
        """The FSDP modules of the trained roots (frozen roots, e.g. a reference copy, are not needed to sample)."""
        return [module for root in self._trained_roots() for module in _fsdp_modules(root)]

    @contextmanager
    def full_parameters(self) -> Iterator[None]:
        """Every unit of the trained modules gathered for the whole block (sampling, evaluation, saving consolidated
        weights): inside, the modules' parameters are plain full tensors and forward passes make no collective call.
        Every process must enter it (gathering is collective). A no-op without sharding."""
        modules = self._gathered_modules()
        for module in modules:
            module.unshard()
            module.set_reshard_after_forward(False, recurse=False)
        try:
            yield
        finally:
            for module in modules:
                module.reshard()
                is_root = any(module is root for root in self.roots)
                module.set_reshard_after_forward(self.reshard_after_forward and not is_root, recurse=False)

    @contextmanager
    def consolidated(self) -> Iterator[None]:
        """In the main process the trained modules hold plain, full parameters for the block (to save them in the
        family's own format); the other processes only take part in gathering them, one parameter at a time. Every
        process must enter it. A no-op without sharding.

        FSDP2's own state-dict hook returns shards; it does nothing while the modules are resharded, so the modules'
        registered parameters are swapped for full copies and swapped back on exit."""
        swaps: list[tuple[nn.Module, str, nn.Parameter]] = []
        for root in self._trained_roots():
            for module in _fsdp_modules(root):
                module.reshard()
            copies: dict[int, nn.Parameter] = {}
            for module in root.modules():
                for name, param in list(module._parameters.items()):
                    if param is None or not is_sharded(param):
                        continue
                    if id(param) not in copies:
                        full = (
                            param.detach().full_tensor().clone()
                        )  # collective, in the same order everywhere; own storage
                        copies[id(param)] = nn.Parameter(full, requires_grad=param.requires_grad)
                    if self.rank == 0:
                        swaps.append((module, name, param))
                        module._parameters[name] = copies[id(param)]
            if self.rank != 0:
                copies.clear()
        try:
            yield
        finally:
            for module, name, param in swaps:
                module._parameters[name] = param

    def _trained_roots(self) -> list[nn.Module]:
        return [root for root in self.roots if any(p.requires_grad for p in root.parameters())]


def _fsdp_modules(root: nn.Module) -> list[nn.Module]:
    """``root`` and its units (every module FSDP2 wrapped), root first."""
    from torch.distributed.fsdp import FSDPModule

    return [module for module in root.modules() if isinstance(module, FSDPModule)]


def _check_covered(policy, roots: list[nn.Module]) -> None:
    """Every trainable parameter must live in a wrapped module (a plain one would never have its gradient reduced)."""
    wrapped = {id(p) for root in roots for p in root.parameters()}
    stray = [i for i, p in enumerate(policy.trainable_parameters()) if id(p) not in wrapped]
    if stray:
        raise ValueError(
            f"{len(stray)} trainable parameter(s) of the {policy.family} policy are outside the modules its "
            "prepare_sharding() wrapped; a family must wrap every module it trains."
        )


__all__ = ["DataParallel", "Strategy", "block_classes", "resolve_mixed_precision", "resolve_strategy", "sharding_units"]
