"""The config check of ``eval.reset_to_best_every`` (REVA-PO's VAPR [18], :mod:`genalign.trainer.validation_anchor`):
the reset moves the policy's trained parameters and its frozen reference copy, so it needs held-out data, full
fine-tuning (the reference copy has the trained parameters' names) and a frozen reference copy. Held-out rows may
come from Python (``genalign.train(..., eval_dataset=...)``), so the trainer checks that there are some."""

from __future__ import annotations

from typing import Any

from genalign.config.core import ConfigError


def check_validation_reset(config: Any) -> None:
    """Raise a :class:`ConfigError` naming the field and the fix when ``eval.reset_to_best_every`` cannot work."""
    every = config.eval.reset_to_best_every
    if not every:
        return
    where = f"eval.reset_to_best_every = {every}"
    policy = config.policy
    lora, reference = getattr(policy, "lora", None), getattr(policy, "reference", None)
    if lora is None or reference is None:
        raise ConfigError(f"{where}: policy.family = {policy.family!r} has no frozen reference copy to re-anchor; "
                          "use a causal_lm or vlm policy, or set it to 0.")  # fmt: skip
    if lora.rank > 0:
        raise ConfigError(f"{where} needs full fine-tuning (policy.lora.rank = 0, got {lora.rank}): with LoRA the "
                          "reference is the base model with the adapters off, which the reset cannot move.")  # fmt: skip
    if reference not in ("auto", "frozen_copy"):
        raise ConfigError(f"{where} needs a frozen reference copy to re-anchor; policy.reference = {reference!r}: "
                          "set it to 'auto' or 'frozen_copy'.")  # fmt: skip
    if config.run.distributed == "fsdp":
        raise ConfigError(f"{where}: the reset copies whole parameters, which run.distributed = 'fsdp' shards; use "
                          "ddp or one process.")  # fmt: skip
