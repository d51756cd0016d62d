"""A causal LM's rollout restricted to its trained actions, for ``algorithm.score_only_trained`` (NAT [220], S-GRPO
[312]): the update's scoring pass then runs the backbone only up to the last trained token of the micro-batch and the
output head only on the trained tokens.

In a causal LM a token's log-prob reads the tokens before it, never those after it, so cutting every completion after
its last trained token leaves the log-probs of the trained tokens unchanged; the untrained tokens before the cut stay
in the attention (``completion_attention``) but get no head pass. What is saved: the backbone's forward and backward
over the cut tail (its activations are never stored), and the ``[n, V]`` head logits of every untrained token.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from genalign.policies.base import Rollout

#: ``per_sample`` keys of a single-turn causal-LM rollout that run along the completion (action) axis.
COMPLETION_AXIS_KEYS = ("completion_ids", "completion_mask", "completion_attention", "completion_routes")
#: ``per_sample`` keys that run along the (left-padded) prompt axis.
PROMPT_AXIS_KEYS = ("prompt_ids", "prompt_mask", "prompt_routes")


def trained_width(trained: Tensor) -> int:
    """The action columns a pass over ``trained`` ``[n, T]`` bool needs: up to the last trained action of any row, at
    least 1 (a micro-batch with nothing trained still makes one cheap pass, so the backward has a graph)."""
    columns = trained.any(dim=0).nonzero()
    return max(int(columns.max()) + 1 if columns.numel() else 0, 1)


def restrict_to_trained(rollout: Rollout, trained: Tensor) -> Rollout:
    """``rollout`` cut after the last trained action of its samples, with only the ``trained`` actions scored.

    Args:
        rollout: a single-turn causal-LM training rollout (per-sample ``completion_ids`` / ``completion_mask`` ``[n,
            C]``, one completion column per action).
        trained: ``[n, T]`` bool, the actions the update trains (its other actions get no gradient).
    Returns:
        A rollout with ``W = trained_width(trained)`` actions: ``completion_mask`` (the scored tokens) and
        ``action_mask`` are ``trained`` (within the real tokens), ``completion_attention`` is the original mask (every
        real token before the cut stays in context), ``old_logp`` and the completion-axis tensors are cut to ``W``,
        and the prompt columns that are padding in every row are dropped (what the plain pass drops itself).
    """
    data: dict[str, Any] = dict(rollout.per_sample)
    if "completion_attention" in data:
        raise ValueError(
            "score_only_trained cuts single-turn completions; this rollout carries completion_attention (multi-turn), "
            "whose environment tokens would need their own cut"
        )
    mask = data["completion_mask"]  # [n, C]
    width = min(trained_width(trained), mask.shape[1])
    kept = trained[:, :width].to(mask.device) & (mask[:, :width] > 0)  # [n, W]
    data["completion_attention"] = mask[:, :width]
    for key in COMPLETION_AXIS_KEYS:
        if key in data and key != "completion_attention":
            data[key] = data[key][:, :width]
    data["completion_mask"] = kept.to(mask.dtype)  # [n, W]
    prompt_mask = data["prompt_mask"]  # [n, P] left-padded: drop the columns that are padding in every row
    first = int(prompt_mask.any(dim=0).long().argmax()) if prompt_mask.numel() else 0
    for key in PROMPT_AXIS_KEYS:
        if key in data:
            data[key] = data[key][:, first:]
    return Rollout(
        rows=rollout.rows,
        outputs=rollout.outputs,
        group_ids=rollout.group_ids,
        old_logp=rollout.old_logp[:, :width],
        action_mask=kept.to(rollout.action_mask.dtype).to(rollout.action_mask.device),
        structure={},  # the scoring pass reads none of it (a structure field has the full action axis)
        per_sample=data,
        info=rollout.info,
        counts=rollout.counts,
        left_padded=rollout.left_padded,
    )


__all__ = ["restrict_to_trained", "trained_width"]
