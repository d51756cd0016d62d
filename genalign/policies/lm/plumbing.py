"""Training plumbing shared by the policies that wrap one transformers model (``self.model``) and a tokenizer."""

from __future__ import annotations

from pathlib import Path

from torch import nn

from genalign.policies.lm.lora import load_weights, save_weights


class SingleModelPlumbing:
    """``trainable_parameters`` / ``modules_to_train`` / ``save`` / ``load`` for a policy holding ``self.model``
    (LoRA-wrapped or not) and ``self.tokenizer``."""

    model: nn.Module

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def modules_to_train(self) -> list[nn.Module]:
        return [self.model]

    def save(self, directory: Path) -> None:
        """LoRA adapters alone (peft format) or all weights (``model.safetensors`` + config), plus the tokenizer."""
        directory = Path(directory)
        save_weights(self.model, directory)
        self.tokenizer.save_pretrained(str(directory))

    def load(self, directory: Path) -> None:
        load_weights(self.model, Path(directory))
