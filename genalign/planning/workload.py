"""What one training process of a config puts in memory, as a family describes it to the planner.

A family builder (:mod:`.lm_workloads`, :mod:`.dlm_workload`, :mod:`.flow_workload`) turns a config into a
:class:`Workload`: the trained module and the frozen modules built on the meta device (exact parameters), and the
traced peaks of the three computations that allocate memory on top of them (:func:`~.tracing.trace_peak`): one update
micro-batch, one reference pass, the rollout. :mod:`.estimate` places all of it on the GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from torch import nn

from genalign.planning.tracing import TracedPeak
from genalign.planning.vllm_share import VLLMShare
from genalign.sampling import SampleSourceStage, build_rules


@dataclass(frozen=True)
class BatchShape:
    """How many samples one process handles in each stage of a training step.

    Attributes:
        samples: rollout samples per process per step (prompts sampled per process x samples per prompt).
        prompts: prompts per process per step.
        micro_batch: samples per forward/backward of the update.
    """

    samples: int
    prompts: int
    micro_batch: int


def samples_per_prompt(cfg) -> int:
    """Samples the rollout draws per prompt: ``group_size``, or more when a sample-source rule asks for it (GFPO
    samples more and trains on a filtered subset; the plan sizes the rollout, its largest batch)."""
    return SampleSourceStage(build_rules(cfg.sample_sources), seed=0, group_size=cfg.group_size).samples_per_prompt


def batch_shape(config, gpus: int) -> BatchShape:
    """:class:`BatchShape` of ``config`` on ``gpus`` processes (the trainer rounds prompts up to a multiple of them,
    ``genalign.trainer.recipe.training_step``; the update splits the local batch into minibatches, then micro-batches)."""
    cfg = config.algorithm
    prompts = math.ceil(cfg.prompts_to_sample() / gpus)
    samples = prompts * samples_per_prompt(cfg)
    per_minibatch = math.ceil(samples / cfg.minibatches)
    return BatchShape(samples=samples, prompts=prompts, micro_batch=max(1, min(cfg.micro_batch_size, per_minibatch)))


@dataclass
class Workload:
    """Memory of one training process of a config, before placement on GPUs.

    Attributes:
        policy: the trained module on the meta device (LoRA added, ``requires_grad`` and gradient checkpointing set as
            in training); the module that sharded training wraps.
        frozen: modules that are never trained and stay whole on every GPU (text encoders, VAE), by name.
        reference_copy: a frozen copy of the policy's original weights loaded for the KL reference (``frozen_copy``
            mode), or None (no KL, or LoRA adapters disabled serve as the reference at no memory).
        parameter_averages: float32 copies of the trainable parameters kept beside them (flow EMA, DiffusionNFT old).
        update: one update micro-batch: forward(s) with gradient and backward.
        reference_pass: the no-grad reference forward of a micro-batch (KL), run while ``update.kept`` is alive.
        rollout: the rollout's transient working set (prefill / denoising / decoding forwards without gradient).
        sampler_cache: bytes the sampler holds during the rollout (KV cache).
        rollout_storage: bytes of the stored rollout that stay on the GPU through the update (flow trajectories).
        vllm: vLLM's share with ``policy.engine: vllm`` (:mod:`.vllm_share`), else None.
        teacher_pass: bytes of the teacher's no-grad pass (:mod:`.teacher_workload`), between rollout and update.
        assumptions: what the figures assume, in words (shown with the plan).
    """

    policy: nn.Module
    frozen: dict[str, nn.Module] = field(default_factory=dict)
    reference_copy: nn.Module | None = None
    parameter_averages: int = 0
    update: TracedPeak = field(default_factory=TracedPeak.zero)
    reference_pass: TracedPeak | None = None
    rollout: TracedPeak = field(default_factory=TracedPeak.zero)
    sampler_cache: int = 0
    rollout_storage: int = 0
    vllm: VLLMShare | None = None
    teacher_pass: int = 0
    assumptions: list[str] = field(default_factory=list)


__all__ = ["BatchShape", "Workload", "batch_shape"]
