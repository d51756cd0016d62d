"""LoRA through peft for the token families (:func:`add_lora`, with the shared
:class:`~genalign.policies.lora.LoRAConfig`), and saving / loading the trainable weights as safetensors (LoRA adapters
alone in peft's format, or all weights)."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import load_file, load_model, save_model
from torch import nn

from genalign.policies.lm.reference import is_peft_model
from genalign.policies.lora import LoRAConfig

ADAPTER_FILE = "adapter_model.safetensors"
FULL_WEIGHTS_FILE = "model.safetensors"


def add_lora(
    model: nn.Module,
    lora: LoRAConfig,
    *,
    target_modules: list[str] | None = None,
    task_type: str | None = "CAUSAL_LM",
) -> nn.Module:
    """Wrap ``model`` in a peft LoRA model whose adapters (and ``modules_to_save``) alone are trainable; ``task_type``
    picks peft's wrapper (``None``: the plain ``PeftModel``, for models that do not ``generate``, such as BERT)."""
    from peft import get_peft_model

    try:
        return get_peft_model(model, lora.peft_config(target_modules=target_modules, task_type=task_type))
    except ValueError as err:  # e.g. target modules or modules_to_save that the model does not have
        raise ValueError(
            f"policy.lora (target_modules={lora.target_modules}, modules_to_save={lora.modules_to_save}) does not "
            f"fit {type(model).__name__}: {err}"
        ) from err


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
