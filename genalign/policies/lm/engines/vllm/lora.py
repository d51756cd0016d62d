"""What vLLM receives from a (peft) policy: checkpoint-named weights, LoRA merged or not, and LoRA adapters.

* :func:`checkpoint_weights` yields ``(checkpoint name, tensor)`` for every base-model parameter in the model's order
  (layer by layer, which lets vLLM's layerwise reload finish each layer as soon as its weights arrived). With
  ``merge_adapters`` each adapted layer's weight is merged *out of place*: peft's own ``merge()`` runs on a copy of the
  layer (plain LoRA, DoRA, LoRA biases alike), so the training weights are never touched and no merge / unmerge
  rounding accumulates in bf16 base weights.
* :func:`export_adapter` is peft's saved adapter (``get_peft_model_state_dict`` + the ``adapter_config.json``
  contents), which vLLM's LoRA loader reads.
* :func:`adapter_unsupported_reason` says why vLLM cannot serve the adapter as a LoRA (so it is merged instead).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from genalign.policies.lm.engines.vllm.weight_names import checkpoint_name
from genalign.policies.lm.reference import is_peft_model

#: peft ``init_lora_weights`` strings vLLM accepts (vllm/lora/peft_helper.py, ``PEFTHelper._init_is_supported``).
VLLM_LORA_INITS = ("gaussian", "eva", "orthogonal", "mica", "lora_ga")


def lora_layers(model: nn.Module) -> dict[str, nn.Module]:
    """peft LoRA layers of ``model`` by module name (empty for a plain model)."""
    if not is_peft_model(model):
        return {}
    from peft.tuners.lora import LoraLayer

    return {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)}


def _merged_copy(layer: nn.Module) -> nn.Module:
    merged = copy.deepcopy(layer)
    merged.merge()  # peft's merge of the active adapters, on the copy
    return merged


@torch.no_grad()
def checkpoint_weights(model: nn.Module, *, merge_adapters: bool) -> Iterator[tuple[str, Tensor]]:
    """``(checkpoint name, tensor)`` of every base-model parameter; LoRA merged in when ``merge_adapters``."""
    layers = lora_layers(model) if merge_adapters else {}
    current: tuple[str, nn.Module] | None = None
    for name, param in model.named_parameters():
        target = checkpoint_name(name)
        if target is None:
            continue
        owner, _, leaf = name.rpartition(".")
        layer_name = owner.removesuffix(".base_layer")
        if owner.endswith(".base_layer") and layer_name in layers:
            if current is None or current[0] != layer_name:
                current = (layer_name, _merged_copy(layers[layer_name]))
            yield target, getattr(current[1].get_base_layer(), leaf).detach()
        else:
            yield target, param.detach()


def adapter_weights(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """The trainable adapter parameters (what changes between pushes in adapter mode)."""
    for name, param in model.named_parameters():
        if checkpoint_name(name) is None:
            yield name, param.detach()


@dataclass(frozen=True)
class AdapterPayload:
    """A peft adapter as sent to the server: ``adapter_config.json`` contents and base64 safetensors bytes."""

    config: dict[str, Any]
    weights: str


def export_adapter(model: nn.Module, dtype: torch.dtype) -> AdapterPayload:
    """peft's saved form of ``model``'s active adapter, tensors cast to ``dtype``."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save

    state = get_peft_model_state_dict(model)
    tensors = {key: value.detach().to(device="cpu", dtype=dtype).contiguous() for key, value in state.items()}
    config = model.peft_config[model.active_adapter].to_dict()
    config = {key: sorted(value) if isinstance(value, set) else value for key, value in config.items()}  # as peft saves
    return AdapterPayload(config=config, weights=base64.b64encode(save(tensors)).decode())


def lora_rank_of(model: nn.Module) -> int:
    """The active adapter's largest rank (``r`` and any ``rank_pattern`` entry); 0 for a plain model."""
    if not is_peft_model(model):
        return 0
    config = model.peft_config[model.active_adapter]
    return max([config.r, *dict(getattr(config, "rank_pattern", None) or {}).values()])


def adapter_unsupported_reason(model: nn.Module, *, max_lora_rank: int) -> str | None:
    """Why vLLM cannot serve ``model``'s adapter as a LoRA, or None when it can.

    The rules are vLLM's adapter checks (vllm/lora/peft_helper.py, ``PEFTHelper._validate_features`` and ``bias:
    Literal["none"]``) plus the server's ``max_lora_rank``.
    """
    config = model.peft_config[model.active_adapter]
    reasons = []
    if getattr(config, "use_dora", False):
        reasons.append("DoRA (use_dora) is not implemented by vLLM")
    if getattr(config, "bias", "none") != "none":
        reasons.append(f"bias={config.bias!r} trains base-layer biases, which a vLLM LoRA cannot carry")
    if getattr(config, "lora_bias", False):
        reasons.append("lora_bias is not supported by vLLM")
    if getattr(config, "modules_to_save", None):
        reasons.append(f"modules_to_save={list(config.modules_to_save)} is not supported by vLLM for causal LMs")
    init = getattr(config, "init_lora_weights", True)
    if isinstance(init, str) and init.lower() not in VLLM_LORA_INITS:
        reasons.append(f"init_lora_weights={init!r} rewrites the base weights, which vLLM does not reproduce")
    if lora_rank_of(model) > max_lora_rank:
        reasons.append(f"rank {lora_rank_of(model)} exceeds the server's max_lora_rank={max_lora_rank}")
    return "; ".join(reasons) or None
