"""Export of the token-LM families (causal_lm, vlm, diffusion_lm): a transformers model folder, or a peft adapter folder.

* all weights (``policy.lora.rank = 0``, or LoRA merged with ``merge_lora``): ``model.save_pretrained`` (config,
  safetensors shards), loadable with the family's auto class (``AutoModelForCausalLM``, ...);
* LoRA kept as adapters: peft's ``save_pretrained`` (``adapter_config.json`` + ``adapter_model.safetensors``), loadable
  with ``PeftModel.from_pretrained(base, folder)`` on the base model the adapter config names;

both with the tokenizer or processor, the generation config genalign samples with (autoregressive families) and a model
card, written by the same code as a checkpoint's ``policy/`` folder (:mod:`genalign.policies.lm.export`).

Merging folds each adapter into its base weight (``W + scale * B @ A``, DoRA's magnitude, PiSSA / OLoRA residuals and
``modules_to_save`` included) with peft's ``merge_and_unload``; the caller builds the policy in float32 for it, so the
sum is rounded once, to the written dtype.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from genalign.policies.lm.core import LoRAConfig, TokenLMPolicy
from genalign.policies.lm.export import write_checkpoint_extras


def write_token_lm(policy: TokenLMPolicy, out: Path, *, merge_lora: bool, dtype: torch.dtype | None) -> str:
    """Write ``policy``'s weights into the empty folder ``out``; ``dtype`` casts every written weight (None keeps
    them: base weights in ``policy.dtype``, adapters as trained). Returns what was written, in words."""
    facts = policy.checkpoint_facts()
    model: nn.Module = policy.model
    lora = facts.lora.rank > 0
    if lora and merge_lora:
        model = model.merge_and_unload()  # unties a tied output head trained as its own copy (modules_to_save)
        facts = replace(facts, lora=LoRAConfig())
    if dtype is not None:
        model.to(dtype)
    model.save_pretrained(str(out))
    policy.preprocessor.save_pretrained(str(out))
    write_checkpoint_extras(out, facts, policy.generation_config())  # replaces the model's own
    if lora and not merge_lora:
        return f"peft LoRA adapter (rank {facts.lora.rank}) for {facts.base_path}"
    return f"transformers model ({facts.auto_class}{', LoRA merged' if lora else ''})"
