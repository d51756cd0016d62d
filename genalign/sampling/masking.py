"""Masking rules: samples that stay in their group's statistics but get no loss weight."""

from __future__ import annotations

import torch

from genalign.sampling.base import SAMPLE_SOURCES, Decision, Outcome, RuleDefaults


def _truncated(outcome: Outcome, name: str) -> torch.Tensor:
    if outcome.truncated is None:  # rejected at config load (needs "truncated"); kept for direct use
        raise ValueError(f"sample source {name!r} needs rollout truncation flags, which this policy does not report")
    return outcome.truncated


@SAMPLE_SOURCES.register(
    "overlong_filter",
    formula="w_i = 0 if o_i hit the length limit (truncated) else 1; advantages still use the whole group",
    source="DAPO overlong filtering (Yu et al. 2025, §3.4); TRL mask_truncated_completions",
    summary="Truncated completions are excluded from the loss, so an answer cut off by the length limit is not "
    "punished for reasoning that might have been right; they still count in their group's mean and std.",
    needs=("truncated",),
)
class OverlongFilter(RuleDefaults):
    """DAPO's overlong filtering: a completion that hit ``max_new_tokens`` without ending gets zero loss weight.

    ``w_i = 1 − truncated_i``; the truncated samples keep their rewards in the group statistics (the advantages of
    the other samples are those of the whole group, as in TRL's ``mask_truncated_completions``), they are only left
    out of the update (and of the aggregation's normaliser).
    """

    def after_rewards(self, outcome: Outcome) -> Decision:
        truncated = _truncated(outcome, "overlong_filter")  # [N]
        frac = float(truncated.float().mean()) if len(outcome) else 0.0
        return Decision(train=~truncated, stats={"frac_truncated": frac, "frac_masked": frac})


@SAMPLE_SOURCES.register(
    "conditional_overlong_filter",
    formula="w_i = 0 if truncated_i and frac_truncated ≤ max_fraction else 1 (frac over the step's batch)",
    source="[125] MicroCoder-GRPO conditional truncation masking",
    summary="Truncated completions are masked only while they are rare: long outputs can grow, but once more than "
    "max_fraction of the batch is truncated they are trained on (with their low reward) again, which pulls the "
    "length back.",
    needs=("truncated",),
    experimental=True,
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
        truncated = _truncated(outcome, "conditional_overlong_filter")  # [N]
        frac = float(truncated.float().mean()) if len(outcome) else 0.0
        masking = frac <= self.max_fraction
        train = ~truncated if masking else torch.ones_like(truncated)
        return Decision(
            train=train, stats={"frac_truncated": frac, "frac_masked": frac if masking else 0.0, "masking": masking}
        )
