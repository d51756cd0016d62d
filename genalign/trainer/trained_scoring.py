"""The update's scoring pass restricted to the trained actions (``algorithm.score_only_trained``): NAT [220] and S-GRPO
[312] update the policy on a subset of the generated tokens (credit ``token_subsample`` zeroes the others'
advantages), and the compute saving is real only if the dropped tokens are not scored.

An action is *trained* when it is real and its advantage is non-zero. With the loss terms that config load allows
with this switch (a ratio objective whose ratio of action ``t`` reads actions ``<= t`` only, no KL, entropy or
regulariser term in the loss), an untrained action contributes nothing to the gradient, so the family scores only
the trained ones (:meth:`~genalign.policies.base.Policy.restrict_to_trained`: a causal LM cuts every completion after
its last trained token and runs the head on the trained tokens only). The untrained actions' log-probs are filled with
the old log-probs (detached: ratio exactly 1, no gradient) and their features with 0; the aggregation's normaliser
still counts every real action (it is computed from the full mask), as the Horvitz–Thompson estimator requires.

Reading chosen for S-GRPO [312]: its abstract calls it a memory-efficient GRPO without saying which tokens it keeps;
genalign's subsets are NAT's (``token_subsample``: uniform or random-prefix, inverse-probability weights), and the
memory is saved by this pass.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from genalign.policies.base import Policy, Rollout, ScoreOutput, ScoreRequest


def trained_actions(advantages: Tensor, mask: Tensor) -> Tensor:
    """``[n, T]`` bool: the real actions (``mask`` ``[n, T]``) whose advantage (``[n]`` or ``[n, T]``) is non-zero."""
    per_action = advantages if advantages.dim() == 2 else advantages[:, None].expand(mask.shape)
    return (mask > 0) & (per_action.to(mask.device) != 0)


def _pad_actions(x: Tensor, num_actions: int) -> Tensor:
    """Zero-pad ``x`` ``[n, W, ...]`` along the action axis to ``[n, num_actions, ...]``."""
    return nn.functional.pad(x, (0, 0) * (x.dim() - 2) + (0, num_actions - x.shape[1]))


def score_trained(
    policy: Policy, rollout: Rollout, advantages: Tensor, request: ScoreRequest, old_logp: Tensor | None
) -> ScoreOutput:
    """``policy.score`` of the trained actions of ``rollout`` only, padded back to its ``T`` actions.

    Args:
        rollout: the micro-batch (``n`` samples, ``T`` actions).
        advantages: ``[n]`` or ``[n, T]`` its advantages after credit.
        old_logp: ``[n, T]`` the old log-probs of the update (None: fully on-policy; the loss then uses the detached
            current ones and the filler is 0).
    Returns:
        ``logp`` ``[n, T]``: the current log-probs (with grad) on the trained actions, ``old_logp`` (detached) elsewhere;
        every requested ``[n, W, ...]`` feature zero-padded to ``[n, T, ...]``.
    """
    trained = trained_actions(advantages, rollout.action_mask)  # [n, T]
    out = policy.score(policy.restrict_to_trained(rollout, trained), request)
    steps = rollout.num_actions
    logp = _pad_actions(out.logp, steps)  # [n, T]
    filler = torch.zeros_like(logp) if old_logp is None else old_logp.detach().to(logp)  # [n, T]
    logp = torch.where(trained.to(logp.device), logp, filler)  # [n, T]
    features = {
        name: _pad_actions(value, steps) if isinstance(value, Tensor) and value.dim() >= 2 else value
        for name, value in out.items()
    }
    return ScoreOutput(logp, features)


def scored_feature_means(metrics: dict[str, Any], advantages: Tensor, mask: Tensor) -> dict[str, Any]:
    """``metrics`` with the per-action means of the score features (``entropy``, ``kl``: taken over every real action
    of ``mask`` ``[n, T]``, where the unscored ones hold 0) rescaled to means over the scored (trained) actions."""
    trained = trained_actions(advantages, mask)
    scale = float(mask.sum()) / max(float(trained.sum()), 1.0)
    return {name: value * scale if name in ("entropy", "kl") else value for name, value in metrics.items()}


__all__ = ["score_trained", "scored_feature_means", "trained_actions"]
