"""The reference policy of the KL regulariser, one component for every token-LM family.

Two ways to get reference log-probs: with LoRA, run the policy's own model with the adapters disabled (no extra memory);
without LoRA, a frozen copy loaded again from the original weights on first use (never a copy of the current, possibly
trained, weights). ``none`` has no reference: a KL request is then an error that names the option.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar

import torch
from torch import nn

from genalign.policies.lm.options import ReferenceMode, ResolvedReferenceMode, resolve_reference_mode
from genalign.policies.sharding import release_gathered

T = TypeVar("T")


def is_peft_model(model: nn.Module) -> bool:
    """Whether ``model`` is a peft wrapper (peft is only imported when LoRA is used, so an unimported peft means no)."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def get_base_model(model: nn.Module) -> nn.Module:
    """The transformers model inside a peft wrapper (its injected LoRA layers still apply), or ``model`` itself."""
    return model.get_base_model() if is_peft_model(model) else model


def adapters_disabled(model: nn.Module) -> AbstractContextManager:
    """Context in which a peft model runs its base weights (a no-op for plain models)."""
    return model.disable_adapter() if is_peft_model(model) else nullcontext()


class ReferencePolicy:
    """Runs a scoring function under the reference weights.

    Args:
        mode: ``lora_disabled`` (``model`` with its adapters disabled), ``frozen_copy`` (``load_frozen()``, called once,
            on the first request) or ``none``.
        model: the policy's model (a peft model in ``lora_disabled`` mode).
        load_frozen: loads the original weights again (``frozen_copy`` mode only).

    Call it with ``score_fn(module) -> result``; the function runs under ``torch.no_grad`` with the reference module
    (the peft model with adapters off, or the frozen copy), so a family scores the reference exactly like the policy.
    """

    def __init__(self, mode: ResolvedReferenceMode, model: nn.Module, load_frozen: Callable[[], nn.Module]) -> None:
        self.mode = mode
        self.model = model
        self.load_frozen = load_frozen
        self._frozen: nn.Module | None = None
        #: Applied to the frozen copy when it is loaded (sharded training shards it: ``Policy.prepare_sharding``).
        self.prepare_frozen: Callable[[nn.Module], None] | None = None

    @property
    def loaded(self) -> bool:
        """Whether the frozen copy has been loaded (always False in the other modes)."""
        return self._frozen is not None

    def __call__(self, score_fn: Callable[[nn.Module], T]) -> T:
        if self.mode == "none":
            raise ValueError("a KL term was requested but policy.reference='none'; set it to 'auto' or drop the KL.")
        with torch.no_grad():
            if self.mode == "lora_disabled":
                with adapters_disabled(self.model):
                    return score_fn(self.model)
            if self._frozen is None:  # the original weights, never a copy of the trained ones
                self._frozen = self.load_frozen().eval().requires_grad_(False)
                if self.prepare_frozen is not None:
                    self.prepare_frozen(self._frozen)
            try:
                return score_fn(self._frozen)
            finally:
                release_gathered(self._frozen)  # a sharded copy keeps only its shards between passes


__all__ = [
    "ReferenceMode",
    "ReferencePolicy",
    "adapters_disabled",
    "get_base_model",
    "is_peft_model",
    "resolve_reference_mode",
]


def anchor_reference(reference: ReferencePolicy, weights: Mapping[str, torch.Tensor]) -> None:
    """Set the frozen reference copy's parameters named in ``weights`` (the policy's trained parameters by their names
    in the model, e.g. a validation checkpoint's: REVA-PO's VAPR [18]) to those values; the copy is loaded first
    when it is not yet. Only ``frozen_copy`` holds weights of its own to move (``lora_disabled`` is the base model
    itself); every name must be a parameter of the copy."""
    if reference.mode != "frozen_copy":
        raise ValueError(f"re-anchoring the reference needs policy.reference = 'frozen_copy' (full fine-tuning), got "
                         f"{reference.mode!r}: with LoRA the reference is the base model with the adapters off.")  # fmt: skip
    reference(lambda module: None)  # loads the frozen copy on first use
    params = dict(reference._frozen.named_parameters())
    missing = sorted(set(weights) - set(params))
    if missing:
        raise ValueError(f"re-anchoring the reference: {missing[0]!r} is not a parameter of the reference copy.")
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value.to(params[name].device, params[name].dtype))
