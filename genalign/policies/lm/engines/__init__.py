"""Rollout back-ends for causal language models, chosen by name (``policy.engine`` in a config).

* ``hf``: Hugging Face ``generate``; any ``AutoModelForCausalLM``; the reference back-end.
* ``static``: genalign's own decode loop (static KV cache, lean forward, finished rows dropped) for the architectures of
  :data:`~genalign.policies.lm.engines.lean_decoder.LAYOUTS` (Llama, Qwen2, Qwen3, Qwen3-MoE, Gemma3); several times
  faster than ``generate`` for small models on CPU, same sampling distribution. Any other model samples through
  ``hf`` instead, with a warning that names the reason. Multi-turn rollouts keep
  each trajectory's cache between its turns (:mod:`genalign.policies.lm.engines.turn_cache`).
* ``vllm``: vLLM, GPU only: a server in vLLM's own environment driven over HTTP + NCCL (default), or colocated in the
  training process (docs/vllm.md); nothing of vLLM is imported here.

Every builder has the signature ``(model, tokenizer, *, model_path, vllm=None) -> RolloutEngine``; ``model`` is the
causal LM or a peft model around it, ``vllm`` the options of the vllm engine (``policy.vllm``, read by it alone).
Importing this package imports no torch (the config's ``policy.vllm`` options are read without it): the engines and
the names of :mod:`~genalign.policies.lm.engines.base` are imported on first use.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from genalign.policies.lm.engines.vllm.options import VLLMOptions
from genalign.registry import Registry

if TYPE_CHECKING:
    from torch import nn

    from genalign.policies.lm.engines.base import RolloutEngine

#: names served from :mod:`genalign.policies.lm.engines.base` (which imports torch) on first use
_FROM_BASE = ("Generation", "RolloutEngine", "SamplingParams", "StopStringMatcher", "finalize_completions")


def __getattr__(name: str) -> Any:
    if name in _FROM_BASE:
        return getattr(importlib.import_module("genalign.policies.lm.engines.base"), name)
    raise AttributeError(f"module 'genalign.policies.lm.engines' has no attribute {name!r}")


ENGINES: Registry[Callable[..., RolloutEngine]] = Registry("rollout engine")


@ENGINES.register(
    "hf",
    source="transformers GenerationMixin.generate",
    summary="Hugging Face generate: any AutoModelForCausalLM (the reference back-end).",
)
def build_hf_engine(model: nn.Module, tokenizer, *, model_path: str, vllm: VLLMOptions | None = None) -> RolloutEngine:
    from genalign.policies.lm.engines.hf import HFGenerateEngine

    return HFGenerateEngine(model, tokenizer)


@ENGINES.register(
    "static",
    source="genalign lean decoder with static KV cache",
    summary="genalign's own decode loop (Llama, Qwen2/3, Qwen3-MoE, Gemma3; others fall back to hf): static KV "
    "cache, finished rows dropped.",
)
def build_static_engine(
    model: nn.Module, tokenizer, *, model_path: str, vllm: VLLMOptions | None = None
) -> RolloutEngine:
    from genalign.policies.lm.engines.lean_decoder import unsupported_reason
    from genalign.policies.lm.engines.static import StaticCacheEngine

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    reason = unsupported_reason(base)
    if reason is not None:
        warnings.warn(
            f"policy.engine='static' cannot run {model_path!r}: {reason}; sampling with engine='hf' instead (same "
            "distribution, slower). Set policy.engine='hf' to silence this warning.",
            stacklevel=2,
        )
        return build_hf_engine(model, tokenizer, model_path=model_path, vllm=vllm)
    return StaticCacheEngine(model, tokenizer)


@ENGINES.register(
    "vllm",
    source="vLLM server (HTTP + native NCCL weight transfer) or colocated; GPU only",
    summary="vLLM rollouts (GPU only): a server in vLLM's own environment, or colocated (docs/vllm.md).",
)
def build_vllm_engine(
    model: nn.Module, tokenizer, *, model_path: str, vllm: VLLMOptions | None = None
) -> RolloutEngine:
    from genalign.policies.lm.engines.vllm.engine import VLLMEngine

    return VLLMEngine(model, tokenizer, model_path=model_path, options=vllm if vllm is not None else VLLMOptions())


__all__ = ["ENGINES", "Generation", "RolloutEngine", "SamplingParams", "StopStringMatcher", "finalize_completions"]
