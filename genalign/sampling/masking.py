"""Masking rules: samples that stay in their group's statistics but get no loss weight."""

from __future__ import annotations

import torch

from genalign.sampling.base import SAMPLE_SOURCES, Decision, Outcome, RuleDefaults


def truncated_rows(outcome: Outcome, name: str) -> torch.Tensor:
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
        truncated = truncated_rows(outcome, "overlong_filter")  # [N]
        frac = float(truncated.float().mean()) if len(outcome) else 0.0
        return Decision(train=~truncated, stats={"frac_truncated": frac, "frac_masked": frac})
