"""Workload of the masked diffusion LM family (``diffusion_lm``).

* Model: ``policy.architecture`` decides the class (masked LM, a causal-LM body, or for ``remote_code`` the
  transformers stand-in with the same shapes from :mod:`.architectures`); LoRA added as the policy adds it.
* Update: the configured likelihood proxy scores one micro-batch: every noisy copy it makes (``K`` per sample, counted
  by :func:`forwards_per_sample` from the proxy itself) goes through the model at once, with full ``[K x micro,
  P + T, V]`` float32 logits, then backward (:func:`genalign.policies.dlm.likelihood.masked_diffusion.masked_token_logp`).
* Rollout: block unmasking of every local sample at once; each step is one model forward on ``[samples, P + T]``
  and one scheduler step (Gumbel-max sampling in float64 over the vocabulary), both traced
  (:meth:`genalign.schedulers.masked_diffusion.MaskedDiffusionScheduler.step`); then the proxy's no-grad estimate of
  the old log-probs of every local sample at once. The larger of the two is the rollout's working set.
"""

from __future__ import annotations

import torch
from torch import nn

from genalign.planning.architectures import ComponentSpec
from genalign.planning.depth import cached_builds
from genalign.planning.lm_workloads import DTYPES, kl_needed, traced_pass
from genalign.planning.meta_models import build_on_meta
from genalign.planning.model_specs import resolve_model_spec
from genalign.planning.workload import BatchShape, Workload

META = torch.device("meta")


def forwards_per_sample(policy_cfg) -> int:
    """Sequences the likelihood proxy puts through the model per sample, counted by calling the configured proxy on a
    one-sample CPU batch with a model function that records its batch sizes."""
    from genalign.policies.dlm.likelihood.masked_diffusion import LIKELIHOOD_PROXIES

    rows: list[int] = []

    def recording_model(input_ids: torch.Tensor, attention_mask) -> torch.Tensor:
        rows.append(input_ids.shape[0])
        return torch.zeros(*input_ids.shape, 8)

    length = policy_cfg.gen_length  # the copies of some proxies (left_to_right) grow with the answer length
    completion = torch.zeros(1, length, dtype=torch.long)
    LIKELIHOOD_PROXIES.get(policy_cfg.likelihood_proxy.name)(
        recording_model, torch.zeros(1, 2, dtype=torch.long), completion, torch.ones(1, length),
        mask_id=7, seeds=torch.zeros(1, dtype=torch.long), prompt_attention_mask=None,
        decode_step=torch.zeros(1, length, dtype=torch.long), **policy_cfg.likelihood_proxy.args,
    )  # fmt: skip
    return sum(rows)


def build_dlm_model(policy_cfg, spec: ComponentSpec) -> nn.Module:
    """The policy's model (``spec``, possibly with fewer blocks) on meta, LoRA added as
    :func:`genalign.policies.dlm.policy.build_policy` adds it."""
    from accelerate import init_empty_weights

    from genalign.policies.lm.lora import add_lora

    model = build_on_meta(spec, DTYPES[policy_cfg.dtype])
    if policy_cfg.lora.rank > 0:
        with init_empty_weights(include_buffers=True):
            model = add_lora(model, policy_cfg.lora, task_type=policy_cfg.lora_task_type())
    return model


def _logits(model: nn.Module, policy_cfg, input_ids: torch.Tensor) -> torch.Tensor:
    """``[B, L, V]`` float32 logits as the policy's ``model_fn`` returns them (a full 4D mask: no padding)."""
    batch, length = input_ids.shape
    mask = torch.ones(batch, 1, length, length, dtype=torch.bool, device=META)
    logits = model(input_ids=input_ids, attention_mask=mask).logits.float()
    if policy_cfg.shifted_logits:
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
    return logits


def _proxy_pass(model: nn.Module, policy_cfg, micro: int, prompt: int, answer: int, copies: int) -> torch.Tensor:
    """The proxy's model work on one micro-batch: ``copies`` noisy copies of each sample, scored at once."""
    from genalign.policies.dlm.likelihood.masked_diffusion import masked_token_logp

    logp = masked_token_logp(
        lambda ids, _attention: _logits(model, policy_cfg, ids),
        torch.zeros(micro, prompt, dtype=torch.long, device=META),
        torch.zeros(micro, answer, dtype=torch.long, device=META),
        torch.zeros(micro, copies, prompt, dtype=torch.bool, device=META),
        torch.zeros(micro, copies, answer, dtype=torch.bool, device=META),
        mask_id=0,
        prompt_attention_mask=None,
    )  # [micro, K, T]
    return logp.sum()


def _rollout_step(model: nn.Module, policy_cfg, batch: int, prompt: int) -> torch.Tensor:
    """One denoising step of the sampler on ``batch`` sequences (forward + scheduler step)."""
    from genalign.schedulers.masked_diffusion import MaskedDiffusionScheduler

    scheduler = MaskedDiffusionScheduler(
        mask_id=0, gen_length=policy_cfg.gen_length, block_length=policy_cfg.block_length,
        temperature=policy_cfg.temperature, remasking=policy_cfg.remasking,
        confidence_threshold=policy_cfg.confidence_threshold,
    )  # fmt: skip
    scheduler.set_timesteps(policy_cfg.steps)
    sample = torch.zeros(batch, prompt + policy_cfg.gen_length, dtype=torch.long, device=META)
    return scheduler.step(_logits(model, policy_cfg, sample), 0, sample, prompt).prev_sample


def dlm_workload(config, shape: BatchShape, gpu_memory_bytes: float) -> Workload:
    """The :class:`Workload` of a ``diffusion_lm`` config (module docstring)."""
    from genalign.policies.lm.core import lora_reference_mode

    del gpu_memory_bytes
    policy_cfg = config.policy
    spec = resolve_model_spec(policy_cfg.model).components["model"]

    build = cached_builds(lambda variant: build_dlm_model(policy_cfg, variant))

    prompt, answer = policy_cfg.max_prompt_tokens or 512, policy_cfg.gen_length
    copies = forwards_per_sample(policy_cfg)

    def score(module: nn.Module):
        return _proxy_pass(module, policy_cfg, shape.micro_batch, prompt, answer, copies)

    update, how = traced_pass(spec, build, score)
    workload = Workload(policy=build(spec), update=update)
    if kl_needed(config):
        workload.reference_pass, _ = traced_pass(spec, build, score, backward=False)
        if lora_reference_mode(policy_cfg.lora, policy_cfg.reference) == "frozen_copy":
            workload.reference_copy = build_on_meta(spec, DTYPES[policy_cfg.dtype]).requires_grad_(False)
    sampling, _ = traced_pass(
        spec, build, lambda module: _rollout_step(module, policy_cfg, shape.samples, prompt), backward=False
    )
    old_logp, _ = traced_pass(  # the rollout's own no-grad proxy estimate of every local sample at once
        spec,
        build,
        lambda module: _proxy_pass(module, policy_cfg, shape.samples, prompt, answer, copies),
        backward=False,
    )
    workload.rollout = max(sampling, old_logp, key=lambda traced: traced.peak)
    workload.assumptions += [
        f"update micro-batch: {shape.micro_batch} samples x {copies} noisy copies (policy.likelihood_proxy="
        f"{policy_cfg.likelihood_proxy.name!r}) of {prompt} prompt + {answer} answer tokens, full-vocabulary logits; "
        f"activations {how}",
        f"rollout: {shape.samples} samples unmasked and scored at once ({prompt + answer} tokens, float64 Gumbel "
        "sampling, full-vocabulary logits)",
    ]
    return workload


__all__ = ["build_dlm_model", "dlm_workload", "forwards_per_sample"]
