"""LoRA adapters for every policy family: one :class:`LoRAConfig` (``policy.lora``), its checks, and what each family
accepts of it, given as data (:class:`LoRARules`).

The options are peft's ``LoraConfig`` options under the same names, checked when the config loads (each error names the
field, the value and the fix). Families differ only in data: their defaults (the flow family's config builds its
``policy.lora`` with rank 32 and ``target_modules: null``, the architecture's attention projections), the
initialisations they accept and the options they do not support (:class:`LoRARules`).

Two options change what "adapters disabled" means: PiSSA / OLoRA initialisation moves the principal part of each
targeted weight into the adapter (the base layer keeps the residual), and ``bias`` other than ``"none"`` trains the base
layers' biases. The model with adapters disabled is then not the original model, so
:attr:`LoRAConfig.adapters_off_is_base` is False and the KL reference must be a frozen copy of the original weights.
Both round-trip through peft on their own: PiSSA (exact SVD) and OLoRA (QR) are deterministic, so
``PeftModel.from_pretrained`` rebuilds the very same residual before loading the trained adapters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

#: peft's shorthand for every linear layer except the output head.
ALL_LINEAR = "all-linear"
#: ``init_lora_weights`` values genalign accepts (peft's names; ``True`` = Kaiming A and zero B, ``False`` = random).
LORA_INITS: tuple[bool | str, ...] = (True, False, "gaussian", "orthogonal", "pissa", "olora")
#: Initialisations that rewrite the base weights (the base layer keeps the residual of the adapter's part).
BASE_REWRITING_INITS = ("pissa", "olora")
#: Why peft initialisations outside :data:`LORA_INITS` are refused (prefix match).
_REFUSED_INITS = {
    "pissa_niter_": "randomised SVD: the residual base weights cannot be rebuilt when the adapter is loaded again",
    "eva": "needs a data-driven calibration pass (eva_config) that genalign does not run",
    "corda": "needs a data-driven calibration pass (corda_config) that genalign does not run",
    "lora_ga": "needs gradient estimates on data (lora_ga_config) that genalign does not compute",
    "loftq": "is meant for quantised base weights (loftq_config), which genalign does not load",
}


def check_lora_init(value: Any, *, rank: int, field: str, allowed: tuple[bool | str, ...] = LORA_INITS) -> None:
    """Raise a ``ValueError`` naming ``field`` when ``value`` is not an accepted ``init_lora_weights``."""
    if value in allowed and type(value) in (bool, str):
        if value == "orthogonal" and rank % 2:
            raise ValueError(f"{field}='orthogonal' needs an even LoRA rank, got rank {rank}; use rank {rank + 1}.")
        return
    choices = ", ".join(str(v).lower() if isinstance(v, bool) else repr(v) for v in allowed)
    reason = next((why for name, why in _REFUSED_INITS.items() if str(value).startswith(name)), None)
    if reason is not None:
        raise ValueError(f"{field}={value!r} is not supported: it {reason}. Use one of {choices}.")
    raise ValueError(f"{field}={value!r} is not a LoRA initialisation; use one of {choices}.")


@dataclass(frozen=True)
class LoRARules:
    """What one family accepts of :class:`LoRAConfig` (data, so that every family shares the one config class)."""

    #: accepted ``init_lora_weights`` values
    inits: tuple[bool | str, ...] = LORA_INITS
    #: options the family does not support: they must keep their defaults
    unsupported: tuple[str, ...] = ()
    #: why the unsupported options are refused (ends the message)
    unsupported_reason: str = ""
    #: what ``target_modules: null`` means in this family; empty: null is refused
    null_targets: str = ""


#: The token families (causal LM, VLM, diffusion LM): every option, and named target modules.
TOKEN_LORA = LoRARules()


@dataclass
class LoRAConfig:
    """LoRA adapters through peft; ``rank=0`` trains all weights. Option names and meanings are peft's; the defaults
    are those of the token families (the flow family's config starts from its own, module docstring)."""

    rank: int = field(default=0, metadata={"help": "LoRA rank; 0 disables LoRA and trains every weight."})
    alpha: float = field(
        default=16.0,
        metadata={"help": "LoRA scaling numerator (scale = alpha / rank, alpha / sqrt(rank) with rsLoRA)."},
    )
    dropout: float = field(default=0.0, metadata={"help": "Dropout on the LoRA input during training."})
    target_modules: list[str] | None = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        metadata={
            "help": "Names of the linear layers that get adapters (peft target_modules), or [all-linear] for every "
            "linear layer except the output head; null (flow family): the architecture's attention projections."
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

    def validate(self, rules: LoRARules | None = None) -> None:
        """Raise a ``ValueError`` naming the first invalid option, its value and the fix; ``rules``: what the family
        accepts (None: the checks every family shares, as when the section loads)."""
        if self.rank < 0:
            raise ValueError(f"policy.lora.rank={self.rank} must be >= 0 (0 disables LoRA).")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"policy.lora.dropout={self.dropout} must be in [0, 1).")
        if rules is not None:
            self._check_unsupported(rules)
        if self.rank == 0:
            changed = [name for name, value in self._new_options().items() if value != _DEFAULT_OPTIONS[name]]
            if changed:
                raise ValueError(
                    f"policy.lora.{changed[0]}={getattr(self, changed[0])!r} has no effect with policy.lora.rank=0 "
                    "(every weight is trained); set rank > 0 or remove the option."
                )
            return
        if self.target_modules is None and not (rules is None or rules.null_targets):
            raise ValueError(
                "policy.lora.target_modules is null while lora.rank > 0; name the linear layers (e.g. "
                f"{LoRAConfig().target_modules}) or give [{ALL_LINEAR}]."
            )
        if self.target_modules is not None and not self.target_modules:
            raise ValueError("policy.lora.target_modules is empty while lora.rank > 0; name the linear layers.")
        if self.target_modules is not None and ALL_LINEAR in self.target_modules and len(self.target_modules) > 1:
            raise ValueError(
                f"policy.lora.target_modules={self.target_modules} mixes {ALL_LINEAR!r} with layer names; give "
                f"[{ALL_LINEAR}] alone or list the layers."
            )
        if self.alpha <= 0:
            raise ValueError(f"policy.lora.alpha={self.alpha} must be > 0 (e.g. 2 x rank).")
        inits = LORA_INITS if rules is None else rules.inits
        check_lora_init(self.init_lora_weights, rank=self.rank, field="policy.lora.init_lora_weights", allowed=inits)
        if self.use_dora and self.init_lora_weights in BASE_REWRITING_INITS:
            raise ValueError(
                f"policy.lora.use_dora=true with init_lora_weights={self.init_lora_weights!r}: peft does not combine "
                "DoRA with an initialisation that rewrites the base weights; drop one of them."
            )
        if not all(self.modules_to_save):
            raise ValueError(f"policy.lora.modules_to_save={self.modules_to_save} contains an empty name; remove it.")

    def _check_unsupported(self, rules: LoRARules) -> None:
        """The options the family does not support keep their defaults."""
        defaults = LoRAConfig()
        for name in rules.unsupported:
            if getattr(self, name) != getattr(defaults, name):
                raise ValueError(
                    f"policy.lora.{name}={getattr(self, name)!r} is not supported here ({rules.unsupported_reason}); "
                    f"remove it (default {getattr(defaults, name)!r})."
                )

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
