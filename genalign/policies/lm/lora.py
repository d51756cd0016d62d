"""LoRA through peft, and saving/loading the trainable weights as safetensors (LoRA adapters alone, or all weights)."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import load_file, load_model, save_model
from torch import nn

from genalign.policies.lm.reference import is_peft_model

ADAPTER_FILE = "adapter_model.safetensors"
FULL_WEIGHTS_FILE = "model.safetensors"


def add_lora(model: nn.Module, *, rank: int, alpha: float, dropout: float, target_modules: list[str]) -> nn.Module:
    """Wrap ``model`` in a peft LoRA model whose adapters alone are trainable."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(target_modules), task_type="CAUSAL_LM"
    )
    return get_peft_model(model, config)


def save_weights(model: nn.Module, directory: Path) -> None:
    """LoRA adapters alone (peft's format: ``adapter_config.json`` + ``adapter_model.safetensors``) or all weights."""
    directory.mkdir(parents=True, exist_ok=True)
    if is_peft_model(model):
        model.save_pretrained(str(directory))
    else:
        save_model(model, str(directory / FULL_WEIGHTS_FILE))
        model.config.save_pretrained(str(directory))


def load_weights(model: nn.Module, directory: Path) -> None:
    """Load what :func:`save_weights` wrote into ``model`` (same LoRA setup required)."""
    if is_peft_model(model):
        from peft import set_peft_model_state_dict

        path = directory / ADAPTER_FILE
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: this policy uses LoRA and expects adapters saved by save().")
        result = set_peft_model_state_dict(model, load_file(str(path)))
        if result.unexpected_keys:
            raise ValueError(f"{path} holds adapter weights this model does not have: {result.unexpected_keys[:5]}")
        return
    path = directory / FULL_WEIGHTS_FILE
    if not path.exists():
        hint = " (it holds LoRA adapters: set policy.lora.rank > 0)" if (directory / ADAPTER_FILE).exists() else ""
        raise FileNotFoundError(f"{path} not found{hint}.")
    load_model(model, str(path))
