"""Memory per GPU of a training config, by component, and whether it fits.

A training step has phases that never overlap, so the peak is the largest of their sums:

* ``rollout = resident + sampling`` (weights gathered for sampling, KV cache or vLLM's share, the sampler's working
  set, the rollout it stores),
* ``update = resident + training`` (the stored rollout, FSDP's gathered blocks and unsharded gradients, one
  micro-batch's activations and the reference pass),

and, with a teacher (``algorithm.teacher``), ``teacher = resident + the teacher's no-grad pass`` between them
(:mod:`.teacher_workload`). ``resident`` is what stays on the GPU throughout: weights, gradients (they survive the
optimizer step until the next ``zero_grad``), optimizer state, float32 parameter averages, the reference copy, frozen
modules (teacher models included), reward models.
Then ``peak on the device = (max(rollout, teacher, update)) x fragmentation + context`` (:class:`Overheads`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Literal

import torch

from genalign.planning.meta_models import ParameterCount, blocks_of, build_on_meta, count_parameters
from genalign.planning.optimizer_state import optimizer_state_bytes
from genalign.planning.reward_networks import reward_networks
from genalign.planning.sharding import GATHERED_BLOCKS, ShardLayout, parameter_bytes, resolve_layout
from genalign.planning.workload import Workload, batch_shape

GB = 1e9
Phase = Literal["resident", "rollout", "teacher", "update"]
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Overheads:
    """What the device adds to the tensors the plan counts.

    Attributes:
        context_bytes: fixed per process (CUDA context, cuBLAS / NCCL workspaces).
        fragmentation: factor on the tensors (the caching allocator reserves whole blocks and keeps freed ones).
        label: how the figures were chosen, printed with the plan.
    """

    context_bytes: float
    fragmentation: float
    label: str


#: Planning a GPU: 1 GB of CUDA context and workspaces, 10 % allocator slack -- typical of PyTorch 2.x on H100/A100
#: (torch.cuda.memory_reserved over memory_allocated); an assumption, printed with every plan.
GPU_OVERHEADS = Overheads(1.0 * GB, 1.10, "GPU: +1.0 GB CUDA context and workspaces, x1.10 caching-allocator slack")
#: The CPU measurements of benchmarks/bench_plan.py compare the tensors alone.
NO_OVERHEADS = Overheads(0.0, 1.0, "tensors only (no device context, no allocator slack)")


@dataclass(frozen=True)
class Component:
    """One line of the plan: ``bytes`` per GPU in ``phase``, and what it is."""

    name: str
    bytes: float
    phase: Phase
    detail: str = ""


@dataclass
class MemoryPlan:
    """The memory of one process of a config on ``gpus`` GPUs of ``gpu_memory_gb``.

    Attributes:
        components: lines by phase; parameters: the policy's exact counts; problems: conditions that fail
            regardless of the totals (vLLM cannot hold its weights); assumptions: what the figures assume.
    """

    config_name: str
    gpus: int
    gpu_memory_gb: float
    layout: ShardLayout
    overheads: Overheads
    parameters: ParameterCount
    components: list[Component] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    def total(self, phase: Literal["rollout", "teacher", "update"]) -> float:
        """Tensor bytes per GPU at the peak of ``phase`` (resident lines plus the phase's own)."""
        return sum(c.bytes for c in self.components if c.phase in ("resident", phase))

    @property
    def tensors_peak(self) -> float:
        return max(self.total("rollout"), self.total("teacher"), self.total("update"))

    @property
    def peak(self) -> float:
        """Bytes per GPU at the peak, device overheads included."""
        return self.tensors_peak * self.overheads.fragmentation + self.overheads.context_bytes

    @property
    def fits(self) -> bool:
        return self.peak <= self.gpu_memory_gb * GB and not self.problems


#: memory model (a family's ``traits.workload``) -> ``"module:function"`` building its :class:`Workload` from
#: ``(config, shape, gpu_memory_bytes)``; imported when used
WORKLOADS: dict[str, str] = {
    "token": "genalign.planning.lm_workloads:text_workload",
    "vision_token": "genalign.planning.lm_workloads:vision_workload",
    "masked_diffusion": "genalign.planning.dlm_workload:dlm_workload",
    "flow": "genalign.planning.flow_workload:flow_workload",
}


def build_workload(config, gpus: int, gpu_memory_bytes: float) -> Workload:
    """The :class:`Workload` of ``config`` on ``gpus`` processes: the memory model its family's traits name."""
    import importlib

    from genalign.policies import family_traits

    kind = family_traits(config.policy).workload
    if kind not in WORKLOADS:
        raise ValueError(
            f"policy.family = {config.policy.family!r} declares no memory model genalign plan knows (traits.workload "
            f"= {kind!r}; known: {', '.join(WORKLOADS)}); give the family config class a traits.workload, or add "
            "its model to genalign.planning.estimate.WORKLOADS."
        )
    module, _, function = WORKLOADS[kind].partition(":")
    return getattr(importlib.import_module(module), function)(config, batch_shape(config, gpus), gpu_memory_bytes)


def _compute_itemsize(config, param: torch.Tensor) -> int:
    """Bytes per element of a gathered copy: ``run.fsdp.param_dtype``, else the parameter's own dtype."""
    dtype = config.run.fsdp.param_dtype
    return torch.empty((), dtype=_DTYPES[dtype]).element_size() if dtype else param.element_size()


def _resident(plan: MemoryPlan, config, workload: Workload) -> None:
    layout, policy = plan.layout, workload.policy
    on_gpu = 0 if layout.cpu_offload else 1
    trainable = [p for p in policy.parameters() if p.requires_grad]
    local = [(layout.local_shape(tuple(p.shape)), p.dtype) for p in trainable]
    optim = config.optim
    where = "" if on_gpu else " (offloaded to CPU: run.fsdp.cpu_offload)"
    add = plan.components.append
    add(Component("weights", on_gpu * parameter_bytes(policy, layout), "resident",
                  f"{plan.parameters.total / 1e9:.3f}B parameters, {_dtype_names(policy)}{where}"))  # fmt: skip
    add(Component("gradients", on_gpu * parameter_bytes(policy, layout, trainable_only=True), "resident",
                  f"{plan.parameters.trainable / 1e6:,.1f}M trainable parameters{where}"))  # fmt: skip
    add(Component("optimizer state", on_gpu * optimizer_state_bytes(local, optim.optimizer, momentum=optim.momentum),
                  "resident", f"{optim.optimizer}{where}"))  # fmt: skip
    if workload.parameter_averages:
        averages = workload.parameter_averages * sum(layout.local_numel(s) for s, _ in local) * 4
        add(Component("parameter averages", on_gpu * averages, "resident", "float32 EMA / DiffusionNFT old weights"))
    if workload.reference_copy is not None:
        add(Component("reference policy", on_gpu * parameter_bytes(workload.reference_copy, layout), "resident",
                      "frozen copy of the original weights (policy.reference: frozen_copy)"))  # fmt: skip
        if layout.sharded:  # its root keeps the gathered parameters: no backward ever reshards them
            add(Component("reference policy (gathered root)", _root_bytes(config, workload.reference_copy),
                          "resident", "embeddings, head, final norm of the sharded copy, gathered from its first pass"))  # fmt: skip
    for name, module in workload.frozen.items():
        add(Component(f"frozen: {name}", parameter_bytes(module, ShardLayout("none", 1, 1)), "resident",
                      f"{count_parameters(module).total / 1e6:,.0f}M parameters, {_dtype_names(module)}"))  # fmt: skip
    for network in reward_networks(config):
        module = build_on_meta(network.spec, torch.float32)
        add(Component(f"reward model: {network.label}", parameter_bytes(module, ShardLayout("none", 1, 1)),
                      "resident", f"{count_parameters(module).total / 1e6:,.0f}M parameters ({network.source})"))  # fmt: skip


def _dtype_names(module) -> str:
    counts: dict[torch.dtype, int] = {}
    for p in module.parameters():
        counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    return " + ".join(str(d).replace("torch.", "") for d, _ in sorted(counts.items(), key=lambda kv: -kv[1]))


def _gathered_bytes(config, params) -> float:
    return sum(p.numel() * _compute_itemsize(config, p) for p in params)


def _root_bytes(config, module) -> float:
    """Gathered bytes of ``module``'s own (non-block) parameters: embeddings, output head, final norms."""
    in_blocks = {id(p) for block in blocks_of(module) for p in block.parameters()}
    return _gathered_bytes(config, (p for p in module.parameters() if id(p) not in in_blocks))


def _gathered(config, workload: Workload, layout: ShardLayout) -> tuple[float, float]:
    """``(update, rollout)`` bytes of gathered (unsharded) copies under FSDP2 (:mod:`.sharding`)."""
    if not layout.sharded:
        return 0.0, 0.0
    policy = workload.policy
    blocks = blocks_of(policy)
    gathered = lambda params: _gathered_bytes(config, params)  # noqa: E731
    roots = _root_bytes(config, policy)
    per_block = sorted((gathered(b.parameters()) for b in blocks), reverse=True)
    grads = sorted((gathered(p for p in b.parameters() if p.requires_grad) for b in blocks), reverse=True)
    kept = per_block if not layout.reshard_after_forward else per_block[:GATHERED_BLOCKS]
    update = roots + sum(kept) + sum(grads[:GATHERED_BLOCKS])
    return update, roots + sum(per_block)


def _phases(plan: MemoryPlan, config, workload: Workload) -> None:
    add, layout = plan.components.append, plan.layout
    update_gathered, rollout_gathered = _gathered(config, workload, layout)
    if layout.sharded:
        add(Component("gathered weights (sampling)", rollout_gathered, "rollout",
                      "every FSDP unit gathered for the rollout (DataParallel.full_parameters)"))  # fmt: skip
        block_note = "two blocks" if layout.reshard_after_forward else "every block (reshard_after_forward: false)"
        add(Component("gathered weights (update)", update_gathered, "update",
                      f"roots' non-block weights + {block_note} + unsharded gradients of two blocks"))  # fmt: skip
    if workload.vllm is not None:
        share = workload.vllm
        if share.mode == "colocated":
            add(Component("vLLM (colocated)", share.reserved(plan.gpu_memory_gb * GB),
                          "rollout" if share.sleeps else "resident",
                          f"gpu_memory_utilization {share.fraction:.2f}" + (", asleep in the update" if share.sleeps
                                                                            else "")))  # fmt: skip
        elif share.weights_per_gpu > 0.9 * share.reserved(plan.gpu_memory_gb * GB):
            plan.problems.append(
                f"the vLLM server holds {share.weights_per_gpu / GB:.1f} GB of weights per GPU but reserves "
                f"{share.reserved(plan.gpu_memory_gb * GB) / GB:.1f} GB (leaving under 10 % for its KV cache); raise "
                "policy.vllm.tensor_parallel_size or policy.vllm.gpu_memory_utilization."
            )
    if workload.sampler_cache:
        add(Component("KV cache", workload.sampler_cache, "rollout", "the generation batch at full length"))
    if workload.rollout.peak:
        add(
            Component("sampling working set", workload.rollout.peak, "rollout", "traced no-grad forward(s) of sampling")
        )
    if workload.rollout_storage:
        for phase in ("rollout", "update"):
            add(Component("stored rollout", workload.rollout_storage, phase, "trajectories and prompt embeddings"))
    if workload.teacher_pass:
        add(Component("teacher pass", workload.teacher_pass, "teacher",
                      "the teacher's no-grad scoring pass of one teacher batch (algorithm.teacher)"))  # fmt: skip
    reference = workload.reference_pass.peak if workload.reference_pass else 0
    activations = max(workload.update.peak, workload.update.kept + reference)
    add(Component("activations", activations, "update",
                  "one micro-batch, traced forward + backward" + (" + reference pass" if reference else "")))  # fmt: skip


def plan_memory(config, *, gpus: int, gpu_memory_gb: float, overheads: Overheads = GPU_OVERHEADS,
                config_name: str = "") -> MemoryPlan:  # fmt: skip
    """The :class:`MemoryPlan` of ``config`` (a loaded, validated :class:`~genalign.config.schema.TrainConfig`).

    Raises:
        ValueError: a value the plan cannot use (zero GPUs, a layout the trainer refuses, a model it cannot build),
            naming the field and the fix.
    """
    if gpus < 1 or gpu_memory_gb <= 0:
        raise ValueError(f"--gpus {gpus} / --gpu-memory {gpu_memory_gb}: give at least 1 GPU and a memory > 0 GB.")
    fsdp = config.run.fsdp
    layout = resolve_layout(config.run.distributed, gpus, shard_size=fsdp.shard_size,
                            reshard_after_forward=fsdp.reshard_after_forward, cpu_offload=fsdp.cpu_offload)  # fmt: skip
    with warnings.catch_warnings():  # the libraries' deprecation notices about the calls they make themselves
        warnings.simplefilter("ignore", FutureWarning)
        workload = build_workload(config, gpus, gpu_memory_gb * GB)
    plan = MemoryPlan(config_name, gpus, gpu_memory_gb, layout, overheads, count_parameters(workload.policy))
    _resident(plan, config, workload)
    _phases(plan, config, workload)
    plan.assumptions += [*workload.assumptions, overheads.label]
    if layout.strategy == "ddp":
        plan.assumptions.append("ddp is FSDP2 over a replicate-only mesh: its all-gather buffers are full copies")
    plan.assumptions.append(_master_weights_note(config, workload, layout))
    return plan


def _master_weights_note(config, workload: Workload, layout: ShardLayout) -> str:
    """Whether float32 master weights exist: genalign updates parameters in their own dtype."""
    low = sorted({str(p.dtype).replace("torch.", "") for p in workload.policy.parameters()
                  if p.requires_grad and p.dtype != torch.float32})  # fmt: skip
    if low:
        return (
            f"trainable weights in {'/'.join(low)}: their gradients and optimizer moments are {'/'.join(low)} too and "
            "the update is applied in place (genalign keeps no float32 master copy; for one, set policy.dtype=float32 "
            "and run.fsdp.param_dtype=bfloat16)"
        )
    if layout.sharded and config.run.fsdp.param_dtype not in (None, "float32"):
        return f"float32 weights are the master copy; FSDP gathers them in {config.run.fsdp.param_dtype} for compute"
    return "trainable weights, gradients and optimizer state in float32"


__all__ = ["GPU_OVERHEADS", "NO_OVERHEADS", "Component", "MemoryPlan", "Overheads", "build_workload", "plan_memory"]
