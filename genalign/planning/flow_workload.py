"""Workload of the flow-matching family (``flow``): the pipelines of every registered flow architecture
(:mod:`genalign.pipelines.architectures`), whose shapes it asks the architecture for.

* Models: the pipeline's transformer (trainable weights added by the policy's own
  :func:`genalign.policies.flow.model.add_trainable_weights`: LoRA in float32, or every weight), and the frozen text
  encoders and VAE, all in ``policy.dtype`` as ``from_pretrained(torch_dtype=...)`` loads them.
* Update: a micro-batch runs one transformer forward with gradient per trained step that any of its samples needs
  (:func:`steps_with_gradient`; the guidance branch runs without gradient) and backpropagates once, so the activations
  of all those forwards are alive together: ``(k - 1) x kept + peak`` of one traced forward and backward.
* Reference: the no-grad forward of the KL reference (LoRA adapters disabled) for one step of a micro-batch.
* Rollout: the largest of the no-grad forwards of sampling (transformer at the sampling batch, VAE decoding of the same
  batch, the text encoders on the step's prompts), and the stored trajectories of every local sample (every latent
  state in float32 and the prompt embeddings), which stay on the GPU until the update ends.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from genalign.pipelines.architectures.base import FlowArchitecture
from genalign.planning.architectures import ComponentSpec
from genalign.planning.depth import cached_builds
from genalign.planning.lm_workloads import DTYPES, traced_pass
from genalign.planning.meta_models import build_on_meta
from genalign.planning.model_specs import resolve_model_spec
from genalign.planning.tracing import TracedPeak, trace_peak
from genalign.planning.workload import BatchShape, Workload
from genalign.policies.capabilities import REFERENCE_FEATURES

META = torch.device("meta")


def steps_with_gradient(policy_cfg, micro_batch: int) -> int:
    """Transformer forwards with gradient per micro-batch: trained tree steps, flow-matching points of likelihood-free
    training, or the trained steps of any sample in the micro-batch (for per-sample random subsets, the worst case:
    ``min(steps, micro_batch x trained steps per sample)``)."""
    from genalign.policies.flow.tree import plan_for_iteration, trained_steps
    from genalign.schedulers.train_steps import select_train_steps

    if policy_cfg.likelihood_free.method != "none":
        return policy_cfg.likelihood_free.num_timesteps
    if policy_cfg.tree.enabled:
        plan = plan_for_iteration(policy_cfg.tree, num_steps=policy_cfg.num_steps, iteration=0)
        return int(trained_steps(policy_cfg.tree, plan).sum())
    steps, strategy = policy_cfg.num_steps, policy_cfg.train_steps
    masks = select_train_steps(strategy, num_steps=steps, num_samples=1, generator=torch.Generator().manual_seed(0))
    per_sample = int(masks.trained.sum())
    return min(steps, micro_batch * per_sample) if strategy.strategy == "random_subset" else per_sample


def latent_shape(arch: type[FlowArchitecture], transformer: nn.Module, vae: nn.Module, policy_cfg, batch: int):
    """Latents of ``batch`` samples, as ``arch.initial_latents`` makes them (``arch.latent_shape`` of the configs)."""
    return arch.latent_shape(
        transformer.config,
        vae.config,
        height=policy_cfg.height,
        width=policy_cfg.width,
        num_frames=policy_cfg.num_frames,
        batch=batch,
    )


def text_embeddings(arch: type[FlowArchitecture], transformer, frozen: dict[str, nn.Module], policy_cfg, batch: int):
    """Meta prompt embeddings ``{keyword: [batch, ...]}`` of the shapes the pipeline's ``encode_prompt`` returns, and the
    source conditioning of an architecture that takes source images (``arch.source_shapes``)."""
    dtype = next(transformer.parameters()).dtype
    configs = {role: module.config for role, module in frozen.items()}
    source_tokens = arch.prompt_source_tokens(configs, height=policy_cfg.height, width=policy_cfg.width)
    shapes = arch.text_embedding_shapes(
        transformer.config, configs, max_sequence_length=policy_cfg.max_sequence_length + source_tokens, batch=batch
    )  # an encoder that reads the source image (Qwen-Image-Edit) adds its vision tokens to the prompt's
    shapes |= arch.source_shapes(
        transformer.config, configs["vae"], height=policy_cfg.height, width=policy_cfg.width,
        num_frames=policy_cfg.num_frames, batch=batch,
    )  # fmt: skip
    return {keyword: torch.zeros(shape, dtype=dtype, device=META) for keyword, shape in shapes.items()}


def build_transformer(policy_cfg, spec: ComponentSpec, arch: type[FlowArchitecture]) -> nn.Module:
    """The transformer (``spec``, possibly with fewer blocks) on meta with the policy's trainable weights and
    gradient checkpointing."""
    from accelerate import init_empty_weights

    from genalign.policies.flow.model import add_trainable_weights

    transformer = build_on_meta(spec, DTYPES[policy_cfg.dtype]).requires_grad_(False)
    with init_empty_weights(include_buffers=True):
        add_trainable_weights(transformer, policy_cfg, arch.lora_target_modules)
    if policy_cfg.gradient_checkpointing:
        transformer.enable_gradient_checkpointing()
    return transformer


def build_frozen(policy_cfg, components: dict[str, ComponentSpec]) -> dict[str, nn.Module]:
    """Text encoders and VAE on meta, in ``policy.dtype`` (the VAE in float32 for float16 policies)."""
    dtype = DTYPES[policy_cfg.dtype]
    frozen = {role: build_on_meta(spec, dtype).requires_grad_(False) for role, spec in components.items()}
    if dtype == torch.float16:  # the policy decodes in float32 (fp16 VAEs overflow)
        frozen["vae"].to(torch.float32)
    return frozen


def _velocity(arch: type[FlowArchitecture], transformer: nn.Module, frozen: dict[str, nn.Module], policy_cfg, batch):
    latents = torch.zeros(latent_shape(arch, transformer, frozen["vae"], policy_cfg, batch), device=META)
    embeds = text_embeddings(arch, transformer, frozen, policy_cfg, batch)
    timestep = torch.zeros(batch, device=META)
    return arch().velocity(transformer, latents, timestep, embeds, guidance=policy_cfg.guidance_scale)


def _decode(arch: type[FlowArchitecture], transformer: nn.Module, vae: nn.Module, policy_cfg, batch: int):
    latents = torch.zeros(latent_shape(arch, transformer, vae, policy_cfg, batch), dtype=vae.dtype, device=META)
    latents = arch.latents_for_decode(latents, vae.config, height=policy_cfg.height, width=policy_cfg.width)
    return vae.decode(latents, return_dict=False)[0]


def _sampling_batch(policy_cfg, shape: BatchShape) -> int:
    """Samples per denoising forward: ``sample_batch_size`` (0: all), whole trees for tree rollouts."""
    if policy_cfg.tree.enabled:
        leaves = policy_cfg.tree.num_leaves
        return max(1, (policy_cfg.sample_batch_size or shape.samples) // leaves) * leaves
    return min(policy_cfg.sample_batch_size or shape.samples, shape.samples)


def _stored_rollout_bytes(arch, transformer, frozen, policy_cfg, shape: BatchShape, cfg_branch: bool) -> int:
    """Float32 latents of every state (or the clean latents and flow-matching noises) and the prompt embeddings."""
    per_latent = math.prod(latent_shape(arch, transformer, frozen["vae"], policy_cfg, 1)) * 4
    lf = policy_cfg.likelihood_free
    states = (1 + lf.num_timesteps) if lf.method != "none" else policy_cfg.num_steps + 1
    embeds = text_embeddings(arch, transformer, frozen, policy_cfg, 1)
    per_embedding = sum(t.numel() * t.element_size() for t in embeds.values()) * (2 if cfg_branch else 1)
    return shape.samples * (states * per_latent + per_embedding)


def flow_workload(config, shape: BatchShape, gpu_memory_bytes: float) -> Workload:
    """The :class:`Workload` of a ``flow`` config (module docstring)."""
    from genalign.pipelines.architectures import FLOW_ARCHITECTURES, architecture_name

    del gpu_memory_bytes
    policy_cfg, micro = config.policy, shape.micro_batch
    published = resolve_model_spec(policy_cfg.model)
    name = architecture_name(policy_cfg.architecture, published.pipeline_class, published.pipeline_config)
    arch = FLOW_ARCHITECTURES.get(name)
    spec = published.components["transformer"]
    frozen = build_frozen(policy_cfg, {r: c for r, c in published.components.items() if r != "transformer"})

    build = cached_builds(lambda variant: build_transformer(policy_cfg, variant, arch))

    def velocity(batch: int):
        return lambda module: _velocity(arch, module, frozen, policy_cfg, batch)

    steps = steps_with_gradient(policy_cfg, micro)
    one, how = traced_pass(spec, build, lambda module: velocity(micro)(module).square().mean())
    workload = Workload(policy=build(spec), frozen=frozen)
    workload.update = TracedPeak(peak=(steps - 1) * one.kept + one.peak, kept=steps * one.kept)
    if REFERENCE_FEATURES & set(config.algorithm.needs()):
        workload.reference_pass, _ = traced_pass(spec, build, velocity(micro), backward=False)
    workload.parameter_averages = int(policy_cfg.ema_decay > 0) + int(policy_cfg.likelihood_free.method == "nft")
    batch = _sampling_batch(policy_cfg, shape)
    denoise, _ = traced_pass(spec, build, velocity(batch), backward=False)
    decoded = min(batch, arch.decode_batch or batch)
    decode = trace_peak(lambda: _decode(arch, workload.policy, frozen["vae"], policy_cfg, decoded), backward=False)
    workload.rollout = max(denoise, decode, key=lambda p: p.peak)
    cfg_branch = arch.uses_true_cfg and policy_cfg.guidance_scale != 1.0
    workload.rollout_storage = _stored_rollout_bytes(arch, workload.policy, frozen, policy_cfg, shape, cfg_branch)
    workload.assumptions += [
        f"update micro-batch: {micro} samples x {steps} transformer forward(s) with gradient before one backward; "
        f"activations {how}",
        f"rollout: {batch} samples per denoising forward, {decoded} per VAE decode; {shape.samples} stored "
        "trajectories",
    ]
    return workload


__all__ = ["build_frozen", "build_transformer", "flow_workload", "latent_shape", "steps_with_gradient"]
