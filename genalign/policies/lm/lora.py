"""LoRA through peft for the token families (:class:`LoRAConfig`, its validation and :func:`add_lora`), and saving /
loading the trainable weights as safetensors (LoRA adapters alone in peft's format, or all weights).

The options are peft's ``LoraConfig`` options under the same names, checked when the config loads (each error names the
field, the value and the fix). Two of them change what "adapters disabled" means: PiSSA / OLoRA initialisation moves
the principal part of each targeted weight into the adapter (the base layer keeps the residual), and ``bias`` other
than ``"none"`` trains the base layers' biases. The model with adapters disabled is then not the original model, so
:attr:`LoRAConfig.adapters_off_is_base` is False and the KL reference must be a frozen copy of the original weights.
Both round-trip through peft on their own: PiSSA (exact SVD) and OLoRA (QR) are deterministic, so
``PeftModel.from_pretrained`` rebuilds the very same residual before loading the trained adapters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from safetensors.torch import load_file, load_model, save_model
from torch import nn

from genalign.policies.lm.reference import is_peft_model
from genalign.policies.lora_options import ALL_LINEAR, BASE_REWRITING_INITS, check_lora_init

ADAPTER_FILE = "adapter_model.safetensors"
FULL_WEIGHTS_FILE = "model.safetensors"


@dataclass
class LoRAConfig:
    """LoRA adapters through peft; ``rank=0`` trains all weights. Option names and meanings are peft's."""

    rank: int = field(default=0, metadata={"help": "LoRA rank; 0 disables LoRA and trains every weight."})
    alpha: float = field(
        default=16.0,
        metadata={"help": "LoRA scaling numerator (scale = alpha / rank, alpha / sqrt(rank) with rsLoRA)."},
    )
    dropout: float = field(default=0.0, metadata={"help": "Dropout on the LoRA input during training."})
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        metadata={
            "help": "Names of the linear layers that get adapters (peft target_modules), or [all-linear] for every "
            "linear layer except the output head."
        },
    )
    use_dora: bool = field(
        default=False, metadata={"help": "DoRA: a trained magnitude vector per adapted layer (peft use_dora)."}
    )
    use_rslora: bool = field(
        default=False, metadata={"help": "Rank-stabilised LoRA: scale = alpha / sqrt(rank) (peft use_rslora)."}
    )
    init_lora_weights: bool | str = field(
        default=True,
        metadata={
            "help": "Adapter initialisation (peft init_lora_weights): true (zero B), false (random, not a no-op), "
            "gaussian, orthogonal (even rank), pissa or olora (these two rewrite the base weights: the KL reference "
            "is then a frozen copy)."
        },
    )
    bias: Literal["none", "all", "lora_only"] = field(
        default="none",
        metadata={"help": "Base-layer biases to train too (peft bias); not 'none' makes the reference a frozen copy."},
    )
    modules_to_save: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Modules trained in full and saved with the adapters (peft modules_to_save), e.g. [lm_head]."
        },
    )

    def validate(self) -> None:
        """Raise a ``ValueError`` naming the first invalid option, its value and the fix."""
        if self.rank < 0:
            raise ValueError(f"policy.lora.rank={self.rank} must be >= 0 (0 disables LoRA).")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"policy.lora.dropout={self.dropout} must be in [0, 1).")
        if self.rank == 0:
            changed = [name for name, value in self._new_options().items() if value != _DEFAULT_OPTIONS[name]]
            if changed:
                raise ValueError(
                    f"policy.lora.{changed[0]}={getattr(self, changed[0])!r} has no effect with policy.lora.rank=0 "
                    "(every weight is trained); set rank > 0 or remove the option."
                )
            return
        if not self.target_modules:
            raise ValueError("policy.lora.target_modules is empty while lora.rank > 0; name the linear layers.")
        if ALL_LINEAR in self.target_modules and len(self.target_modules) > 1:
            raise ValueError(
                f"policy.lora.target_modules={self.target_modules} mixes {ALL_LINEAR!r} with layer names; give "
                f"[{ALL_LINEAR}] alone or list the layers."
            )
        if self.alpha <= 0:
            raise ValueError(f"policy.lora.alpha={self.alpha} must be > 0 (e.g. 2 x rank).")
        check_lora_init(self.init_lora_weights, rank=self.rank, field="policy.lora.init_lora_weights")
        if self.use_dora and self.init_lora_weights in BASE_REWRITING_INITS:
            raise ValueError(
                f"policy.lora.use_dora=true with init_lora_weights={self.init_lora_weights!r}: peft does not combine "
                "DoRA with an initialisation that rewrites the base weights; drop one of them."
            )
        if not all(self.modules_to_save):
            raise ValueError(f"policy.lora.modules_to_save={self.modules_to_save} contains an empty name; remove it.")

    def _new_options(self) -> dict[str, Any]:
        """The options beyond rank, alpha, dropout and targets (they only mean something with adapters)."""
        return {
            "use_dora": self.use_dora,
            "use_rslora": self.use_rslora,
            "init_lora_weights": self.init_lora_weights,
            "bias": self.bias,
            "modules_to_save": self.modules_to_save,
        }

    @property
    def adapters_off_is_base(self) -> bool:
        """Whether the model with its adapters disabled is the original model (module docstring)."""
        return self.init_lora_weights not in BASE_REWRITING_INITS and self.bias == "none"

    def peft_config(self, *, target_modules: list[str] | None = None, task_type: str | None = "CAUSAL_LM"):
        """peft's ``LoraConfig`` of these options; ``target_modules`` overrides the configured names (a VLM's scope)."""
        from peft import LoraConfig

        targets = list(self.target_modules if target_modules is None else target_modules)
        return LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=ALL_LINEAR if targets == [ALL_LINEAR] else targets,
            use_dora=self.use_dora,
            use_rslora=self.use_rslora,
            init_lora_weights=self.init_lora_weights,
            bias=self.bias,
            modules_to_save=list(self.modules_to_save) or None,
            task_type=task_type,
        )


_DEFAULT_OPTIONS = LoRAConfig()._new_options()


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
