"""Macro actions: runs of consecutive tokens as the unit of the importance ratio and of credit (ratio level of
:data:`~genalign.algorithms.ratio_levels.base.RATIO_LEVELS`; experimental tier)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.ratio_levels.base import (
    RATIO_LEVELS,
    ClipFn,
    LevelOutput,
    action_positions,
    level_output,
    segment_mean,
)


def macro_action_ids(mask: Tensor, length: int) -> tuple[Tensor, Tensor]:
    """``(ids, sizes)``, both ``[N, T]`` long: the macro action of every action (consecutive windows of ``length``
    valid actions, counted from each row's first valid action) and the number of valid actions in it (the last
    window of a row may be shorter)."""
    position = action_positions(mask)  # [N, T] 1-based among the valid actions
    ids = ((position - 1.0) // length).long()  # [N, T]
    total = mask.sum(1, keepdim=True)  # [N, 1]
    sizes = (total - ids * length).clamp(1, length).long()  # [N, T]
    return ids, sizes


def perplexity_macro_ids(logp: Tensor, mask: Tensor, max_length: int) -> tuple[Tensor, Tensor]:
    """``(ids, sizes)`` ``[N, T]`` long: macro actions that end where the perplexity would rise. Along each row's
    valid actions a new macro action starts at action ``t`` when its surprisal ``−logp_t`` exceeds the mean surprisal
    of the current macro action (adding it would raise the macro action's perplexity) or when the current one already
    holds ``max_length`` actions; padding continues the last macro action."""
    ids = torch.zeros(mask.shape, dtype=torch.long)
    for row, (values, valid) in enumerate(zip((-logp).tolist(), (mask > 0).tolist(), strict=True)):
        current, total, count = 0, 0.0, 0
        for t, (surprisal, real) in enumerate(zip(values, valid, strict=True)):
            if real and count and (surprisal > total / count or count >= max_length):
                current, total, count = current + 1, 0.0, 0
            if real:
                total, count = total + surprisal, count + 1
            ids[row, t] = current
    sizes = torch.zeros(mask.shape, dtype=torch.long)
    for row in range(mask.shape[0]):
        counts = torch.bincount(ids[row][mask[row] > 0], minlength=int(ids[row].max()) + 1)
        sizes[row] = counts[ids[row]].clamp_min(1)
    return ids, sizes


@RATIO_LEVELS.register(
    "macro_action",
    formula="macro action m = n consecutive tokens (fixed), or tokens until −logp_t > the macro action's mean "
    "surprisal (perplexity); ρ_im = Π_{t∈m} ρ_it = exp(Σ_{t∈m} ℓ_it), clipped per macro "
    "action; A_im = mean_{t∈m} A_it; every action of m carries A_im·clip(ρ_im)",
    source="[246] MA-RLHF (n-gram and perplexity-based macro actions)",
    summary="Macro actions of n tokens as the unit of the policy ratio and of credit: the ratio is the macro "
    "action's probability ratio, clipped once per macro action.",
)
def macro_action_level(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_fn: ClipFn,
    batch: StepBatch,
    *,
    macro_length: int = 5,
    termination: Literal["fixed", "perplexity"] = "fixed",
) -> LevelOutput:
    """MA-RLHF [246]: the policy acts in macro actions (runs of tokens), which shortens the distance between actions
    and rewards. A macro action's probability is the product of its tokens' probabilities, so its importance ratio is
    ``ρ_m = exp(Σ_{t∈m} ℓ_t)`` (not a length-normalised mean as in ``sentence``), clipped once per macro action; its
    advantage is the mean of its actions' advantages (per-action credit from the rules before is pooled per macro
    action); every action of the macro action carries the macro action's surrogate, so the aggregation modes keep
    their meaning.

    Terminations: ``fixed`` cuts n-grams (MA-RLHF's n-gram termination; ``macro_length = 5`` is our default), counted
    over the valid actions of each sequence; ``perplexity`` (MA-RLHF's perplexity-based termination) ends a macro
    action where the next action's surprisal under the behaviour policy exceeds the macro action's mean, i.e. where
    the macro action's perplexity would rise, with at most ``macro_length`` actions (:func:`perplexity_macro_ids`).
    Reading chosen: the parsing-based termination (syntactic constituents) and the paper's macro-level critic are
    not built: group-relative advantages stand in for the critic.

    Args:
        log_ratio, advantages, mask: ``[N, T]``.
        clip_fn: the chosen clip form.
        batch: reads ``behaviour_logp`` ``[N, T]`` (``termination: perplexity``).
        macro_length: ``n >= 1`` tokens per macro action (1 gives the token level); the cap with ``perplexity``.
        termination: ``fixed`` or ``perplexity``.
    """
    if not (isinstance(macro_length, int) and macro_length >= 1):
        raise ValueError(f"macro_length must be an integer >= 1 (tokens per macro action), got {macro_length!r}")
    if termination == "fixed":
        ids, sizes = macro_action_ids(mask, macro_length)  # [N, T] each
    elif termination == "perplexity":
        behaviour = batch.require("behaviour_logp", "ratio level 'macro_action' (termination: perplexity)")
        ids, sizes = perplexity_macro_ids(behaviour.detach().cpu(), mask.cpu(), macro_length)
        ids, sizes = ids.to(mask.device), sizes.to(mask.device)
    else:
        raise ValueError(f"termination={termination!r} must be 'fixed' (n-grams) or 'perplexity'")
    macro_log = segment_mean(log_ratio, mask, ids) * sizes.to(log_ratio.dtype)  # [N, T] Σ_{t∈m} ℓ_t
    pooled = torch.where(mask > 0, segment_mean(advantages, mask, ids), advantages)  # [N, T] A_m
    clipped = clip_fn(macro_log, pooled)
    return level_output(pooled, clipped.log_weight, macro_log, clipped)
