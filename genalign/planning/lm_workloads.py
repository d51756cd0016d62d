"""Workloads of the autoregressive token families (``causal_lm``, ``vlm``): what their policies put in memory.

* Model: built from its config on the meta device, LoRA added with the family's own function and targets
  (:func:`genalign.policies.lm.lora.add_lora`, for a VLM inside the configured scope), the vision tower frozen as
  configured, gradient checkpointing enabled as the policy enables it.
* Update: one micro-batch of ``[prompt | completion]`` at the longest lengths the config allows (``max_prompt_tokens``
  + ``max_new_tokens``; a VLM's prompt holds one image at ``max_pixels``, counted as the architecture's processor
  writes it (:meth:`~genalign.policies.vlm.architectures.base.VLMArchitecture.planned_image_tokens`), plus
  :data:`VLM_PROMPT_TEXT_TOKENS` text tokens), through the backbone and the chunked log-prob head the policy scores with
  (:func:`~genalign.policies.lm.logprobs.backbone_hidden_states`, ``_head_logprobs``), then backward.
* Reference: the no-grad pass of the same micro-batch under the reference weights, when a KL term asks for it.
* Teacher: the teacher models' weights and the teacher's no-grad pass (:mod:`.teacher_workload`).
* Rollout: the KV cache of the generation batch (``static``/``hf`` engines: every local sample at once for causal
  LMs, ``rollout_batch_size`` for VLMs; ``2 x layers x batch x kv_heads x (P + C) x head_dim`` in the weight dtype)
  and the no-grad prefill of the prompts; with ``engine: vllm`` the vLLM process's share instead (:mod:`.vllm_share`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from genalign.planning.architectures import ComponentSpec
from genalign.planning.depth import cached_builds, traced_by_depth
from genalign.planning.meta_models import build_on_meta
from genalign.planning.model_specs import resolve_model_spec
from genalign.planning.teacher_workload import add_teacher
from genalign.planning.tracing import TracedPeak, storage_keys, trace_peak
from genalign.planning.vllm_share import vllm_workload_terms
from genalign.planning.workload import BatchShape, Workload
from genalign.policies.capabilities import REFERENCE_FEATURES

#: Text tokens assumed for a VLM prompt (the config bounds the image, not the text).
VLM_PROMPT_TEXT_TOKENS = 256
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def kl_needed(config) -> bool:
    """Whether the update asks the policy for a feature of its reference (a KL, the reference's log-probs): the
    reference is then loaded."""
    return bool(REFERENCE_FEATURES & set(config.algorithm.needs()))


def build_token_model(policy_cfg, spec: ComponentSpec, *, vlm: bool) -> nn.Module:
    """The policy's model (``spec``: its architecture, possibly with fewer blocks) on meta as training sees it: LoRA,
    frozen vision tower, gradient checkpointing."""
    from accelerate import init_empty_weights

    from genalign.policies.lm.lora import add_lora

    model = build_on_meta(spec, DTYPES[policy_cfg.dtype])
    with init_empty_weights(include_buffers=True):
        if policy_cfg.lora.rank > 0:
            targets = None
            if vlm:
                from genalign.policies.vlm.model import lora_module_names

                targets = lora_module_names(model, policy_cfg.lora.target_modules, policy_cfg.lora_scope)
            model = add_lora(model, policy_cfg.lora, target_modules=targets)
    if vlm and policy_cfg.freeze_vision_tower:
        from genalign.policies.lm.reference import get_base_model
        from genalign.policies.vlm.model import vision_tower

        vision_tower(get_base_model(model)).requires_grad_(False)
    if policy_cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def _existing(model: nn.Module) -> set[int]:
    """Parameters and their (pre-allocated) gradients: memory the trace does not count."""
    for param in model.parameters():
        if param.requires_grad and param.grad is None:
            param.grad = torch.zeros_like(param)  # accumulation in place, as from the second micro-batch on
    return storage_keys(model.parameters()) | storage_keys(p.grad for p in model.parameters() if p.grad is not None)


def _language_inputs(model: nn.Module, batch: int, length: int, *, vlm: bool) -> dict[str, torch.Tensor]:
    """Meta inputs of one ``[batch, length]`` pass: ids, a 4D mask (what sdpa gets with padding) and positions."""
    meta = torch.device("meta")
    positions = torch.arange(length, device=meta).expand(batch, length)
    if vlm:  # multimodal rotary positions: [3, B, L]
        positions = positions.unsqueeze(0).expand(3, batch, length)
    return {
        "input_ids": torch.zeros(batch, length, dtype=torch.long, device=meta),
        "attention_mask": torch.ones(batch, 1, length, length, dtype=torch.bool, device=meta),
        "position_ids": positions,
    }


def _score_pass(model: nn.Module, policy_cfg, batch: int, prompt: int, completion: int, *, vlm: bool, entropy: bool):
    """One scoring pass as the policy runs it: backbone over ``[prompt | completion]``, chunked head on the
    completion positions; returns the summed log-probs (and entropies)."""
    from genalign.policies.lm.logprobs import _head_logprobs, backbone_hidden_states
    from genalign.policies.lm.reference import get_base_model

    hidden = backbone_hidden_states(model, **_language_inputs(model, batch, prompt + completion, vlm=vlm))
    hidden = hidden[:, prompt - 1 : prompt - 1 + completion].reshape(-1, hidden.shape[-1])  # [B * C, H]
    targets = torch.zeros(hidden.shape[0], dtype=torch.long, device=hidden.device)
    logp, ent, _ = _head_logprobs(
        hidden,
        targets,
        get_base_model(model).get_output_embeddings(),
        temperature=policy_cfg.temperature,
        chunk_size=policy_cfg.logprob_chunk_size,
        with_entropy=entropy,
    )
    return logp.sum() + ent.sum()


def _prompt_tokens(policy_cfg, model: nn.Module, *, vlm: bool) -> int:
    if not vlm:
        return policy_cfg.max_prompt_tokens or 512
    from genalign.policies.vlm.architectures import architecture_of

    return VLM_PROMPT_TEXT_TOKENS + architecture_of(model.config).planned_image_tokens(
        model.config, policy_cfg.max_pixels
    )


def kv_cache_bytes(model: nn.Module, batch: int, length: int) -> int:
    """``2 x layers x batch x kv_heads x length x head_dim x itemsize`` (the static engine's cache, K and V)."""
    text = model.config.get_text_config()
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    itemsize = next(model.parameters()).element_size()
    return 2 * text.num_hidden_layers * batch * kv_heads * length * head_dim * itemsize


def traced_pass(spec: ComponentSpec, build, compute, *, backward: bool = True) -> tuple[TracedPeak, str]:
    """``compute(model)`` traced on ``build(spec)`` at the model's full depth (:func:`~.depth.traced_by_depth`)."""
    return traced_by_depth(
        spec, build, lambda model: trace_peak(lambda: compute(model), existing=_existing(model), backward=backward)
    )


def token_workload(config, shape: BatchShape, gpu_memory_bytes: float, *, vlm: bool) -> Workload:
    """The :class:`Workload` of a ``causal_lm`` or ``vlm`` config (module docstring)."""
    from genalign.policies.lm.core import lora_reference_mode

    policy_cfg = config.policy
    if vlm and not policy_cfg.freeze_vision_tower and policy_cfg.lora.rank == 0:
        raise ValueError(
            "genalign plan traces the language model of a VLM; with a trainable vision tower "
            "(policy.freeze_vision_tower=false and no LoRA) its activations are not planned. Set "
            "policy.freeze_vision_tower=true or use policy.lora."
        )
    spec = resolve_model_spec(policy_cfg.model).components["model"]

    build = cached_builds(lambda variant: build_token_model(policy_cfg, variant, vlm=vlm))

    model = build(spec)
    prompt, completion = _prompt_tokens(policy_cfg, model, vlm=vlm), policy_cfg.max_new_tokens
    micro = shape.micro_batch

    def score(module: nn.Module):  # the update asks for the entropy whenever the family has it (logged)
        return _score_pass(module, policy_cfg, micro, prompt, completion, vlm=vlm, entropy=True)

    update, how = traced_pass(spec, build, score)
    workload = Workload(policy=model, update=update)
    frozen_copy = lora_reference_mode(policy_cfg.lora, policy_cfg.reference) == "frozen_copy"

    def reference_copy() -> nn.Module | None:  # LoRA: the adapters disabled serve as the reference, at no memory
        return build_on_meta(spec, DTYPES[policy_cfg.dtype]).requires_grad_(False) if frozen_copy else None

    if kl_needed(config):
        workload.reference_pass, _ = traced_pass(spec, build, score, backward=False)
        workload.reference_copy = reference_copy()
    add_teacher(
        workload, config, shape, prompt=prompt, completion=completion, policy_spec=spec, policy_build=build,
        score=lambda module, batch, length, tokens: _score_pass(module, policy_cfg, batch, length, tokens, vlm=vlm,
                                                                 entropy=True),
        reference_copy=reference_copy,
        trace=lambda variant, builder, compute: traced_pass(variant, builder, compute, backward=False)[0],
    )  # fmt: skip
    image = f"; VLM prompt = one image at max_pixels + {VLM_PROMPT_TEXT_TOKENS} text tokens" if vlm else ""
    workload.assumptions.append(
        f"update micro-batch: {micro} samples of {prompt} prompt + {completion} completion tokens (the longest the "
        f"config allows){image}; activations {how}"
    )
    _add_rollout(workload, config, shape, gpu_memory_bytes, prompt, completion, spec, build, vlm=vlm)
    return workload


def _add_rollout(workload: Workload, config, shape: BatchShape, gpu_memory_bytes: float, prompt: int,
                 completion: int, spec: ComponentSpec, build, *, vlm: bool) -> None:  # fmt: skip
    """The sampler's share: vLLM's, or the KV cache and prefill of the HF / static engines."""
    policy_cfg, model = config.policy, workload.policy
    engine = "hf" if vlm else policy_cfg.engine
    if engine == "vllm":
        vllm_workload_terms(workload, policy_cfg, gpu_memory_bytes)
        return
    batch = min(policy_cfg.rollout_batch_size, shape.samples) if vlm else shape.samples
    workload.sampler_cache = kv_cache_bytes(model, batch, prompt + completion)

    def prefill(module: nn.Module) -> Any:
        inputs = _language_inputs(module, batch, prompt, vlm=vlm)
        return module(**inputs, use_cache=False, logits_to_keep=1).logits.float()

    workload.rollout, _ = traced_pass(spec, build, prefill, backward=False)
    workload.assumptions.append(
        f"rollout ({engine} engine): KV cache of {batch} samples x {prompt + completion} tokens, allocated at once"
    )


__all__ = [
    "VLM_PROMPT_TEXT_TOKENS",
    "build_token_model",
    "kl_needed",
    "kv_cache_bytes",
    "text_workload",
    "token_workload",
    "traced_pass",
    "vision_workload",
]


def text_workload(config, shape: BatchShape, gpu_memory_bytes: float) -> Workload:
    """The :class:`Workload` of a text-only autoregressive policy (``traits.workload = "token"``)."""
    return token_workload(config, shape, gpu_memory_bytes, vlm=False)


def vision_workload(config, shape: BatchShape, gpu_memory_bytes: float) -> Workload:
    """The :class:`Workload` of a vision-language policy (``traits.workload = "vision_token"``)."""
    return token_workload(config, shape, gpu_memory_bytes, vlm=True)
