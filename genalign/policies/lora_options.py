"""LoRA options shared by every family: peft's ``all-linear`` shorthand and the accepted ``init_lora_weights`` values,
checked when the config loads (each error names the field, the value and the fix)."""

from __future__ import annotations

from typing import Any

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
