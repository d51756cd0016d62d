"""The reference policy of the KL regulariser for causal LMs.

Two ways to get reference log-probs: with LoRA, run the same model with the adapters disabled (no extra memory); without
LoRA, a frozen copy loaded again from the original weights (never a copy of the current, possibly trained, weights).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Literal

from torch import nn

ReferenceMode = Literal["auto", "lora_disabled", "frozen_copy", "none"]


def resolve_reference_mode(mode: ReferenceMode, lora_enabled: bool) -> Literal["lora_disabled", "frozen_copy", "none"]:
    """``auto`` -> ``lora_disabled`` with LoRA, ``frozen_copy`` without."""
    if mode == "auto":
        return "lora_disabled" if lora_enabled else "frozen_copy"
    if mode == "lora_disabled" and not lora_enabled:
        raise ValueError(
            "policy.reference='lora_disabled' needs LoRA (policy.lora.rank > 0); use 'frozen_copy' or 'auto'."
        )
    return mode


def adapters_disabled(model: nn.Module) -> AbstractContextManager:
    """Context in which a peft model runs its base weights (a no-op for plain models)."""
    return model.disable_adapter() if hasattr(model, "disable_adapter") else nullcontext()
