"""Conditional overlong filtering, whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

import torch

from genalign.sampling.base import SAMPLE_SOURCES, Decision, Outcome, RuleDefaults
from genalign.sampling.masking import truncated_rows


@SAMPLE_SOURCES.register(
    "conditional_overlong_filter",
    formula="w_i = 0 if truncated_i and frac_truncated ≤ max_fraction else 1 (frac over the step's batch)",
    source="[125] MicroCoder-GRPO conditional truncation masking",
    summary="Truncated completions are masked only while they are rare: long outputs can grow, but once more than "
    "max_fraction of the batch is truncated they are trained on (with their low reward) again, which pulls the "
    "length back.",
    needs=("truncated",),
)
class ConditionalOverlongFilter(RuleDefaults):
    """[125] conditional truncation masking: mask truncated completions only under a condition.

    Reading chosen: the abstract names the mechanism ("conditional truncation masking to improve long output potential
    while maintaining training stability") but not its condition. genalign conditions on the batch's truncation rate:
    ``w_i = 0`` for truncated samples when ``frac_truncated ≤ max_fraction``, else ``w_i = 1`` for every sample. Masking
    lets lengths grow (potential); when truncation becomes common the unmasked, usually low-reward truncated samples
    push lengths back (stability). ``max_fraction`` is genalign's choice, not a published value.

    Args:
        max_fraction: the largest fraction of truncated samples in the step's batch for which they are masked.
    """

    def __init__(self, *, max_fraction: float = 0.1) -> None:
        if not 0.0 <= max_fraction <= 1.0:
            raise ValueError(f"max_fraction = {max_fraction!r} must be in [0, 1] (a fraction of the batch)")
        self.max_fraction = max_fraction

    def after_rewards(self, outcome: Outcome) -> Decision:
        truncated = truncated_rows(outcome, "conditional_overlong_filter")  # [N]
        frac = float(truncated.float().mean()) if len(outcome) else 0.0
        masking = frac <= self.max_fraction
        train = ~truncated if masking else torch.ones_like(truncated)
        return Decision(
            train=train, stats={"frac_truncated": frac, "frac_masked": frac if masking else 0.0, "masking": masking}
        )
