"""Inverse-Q* [188]: token-level preference optimisation without preference data, the conditionally optimal policy
estimated by the model itself (experimental tier: the abstract leaves the estimator and the loss open).

The estimate ``π*`` is the teacher's log-probability of each sampled token (``teacher_action_logp``,
:mod:`genalign.teachers`): a ``self`` teacher (the policy's base or current weights) whose ``context`` conditions it
on what makes a response optimal, e.g. the row's reference answer (``context: "\\nReference answer: {answer}\\n"``) or
an instruction to answer well. ``n`` samples, ``T`` actions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.objectives.base import OBJECTIVES, checked_binding
from genalign.algorithms.objectives.preference import check_beta
from genalign.algorithms.scores import ScoreOutput


def _check_inverse_q(*, beta: float, max_reward: float) -> None:
    check_beta(beta, "inverse_q", "DPO uses 0.1")
    if not max_reward > 0:
        raise ValueError(f"max_reward={max_reward!r} must be > 0 (the clip of |log π*/π_ref| per token, e.g. 10.0).")


@OBJECTIVES.register(
    "inverse_q",
    uses_old_logp=False,
    bind=checked_binding("inverse_q", _check_inverse_q),
    needs=("ref_logp", "teacher_action_logp", "teacher_scored"),
    formula="h_it = logπθ(o_t) − logπref(o_t); r*_it = clip(logπ*(o_t) − logπref(o_t), ±c) with π* the self "
    "teacher under its context; q_it = σ(β r*_it); ℓ_it = −[q_it log σ(β h_it) + (1 − q_it) log σ(−β h_it)] on the "
    "scored samples",
    source="[188] Inverse-Q* (token-level DPO-style objective, the conditionally optimal policy estimated by the model "
    "itself); reading chosen: π* = the policy's self teacher under a privileged context, a per-token Bradley-Terry "
    "against the reference with π*'s preference as the soft label",
    summary="Each sampled token is a DPO-style comparison of the policy with the reference, labelled by how much the "
    "model itself, conditioned on what makes a response optimal, prefers that token to the reference: the token "
    "rewards of an estimated optimal policy imitated without preference pairs or a reward model.",
)
def inverse_q(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    beta: float = 0.1,
    max_reward: float = 10.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Inverse-Q* [188]. In the token-level MDP DPO's implicit token reward is ``β·h_t = β·log πθ(o_t)/π_ref(o_t)``
    ([187]), and the optimal policy's is ``β·r*_t = β·log π*(o_t)/π_ref(o_t)``. Inverse-Q* estimates the conditionally
    optimal policy ``π*`` from the model itself and trains token by token, with no reward model, value model or
    preference pair.

    Reading chosen: ``π*`` is the self teacher's log-prob of the token under its privileged context (the reference
    answer or a guiding instruction); each token is a DPO-style Bradley-Terry comparison of the policy with the
    reference, ``P(πθ ≻ π_ref at o_t) = σ(β h_t)``, fitted to the estimated optimal preference ``q_t = σ(β r*_t)``
    by cross-entropy: ``ℓ_t = −[q_t log σ(β h_t) + (1 − q_t) log σ(−β h_t)]``, minimal at ``h_t = r*_t`` (the
    implicit token reward imitates the estimated optimal one; tokens that π* finds likelier than the reference are
    raised, the others lowered). ``r*`` is clipped to ``±max_reward``; samples the teacher did not score get no loss.
    The advantages are not used.

    Args:
        score: ``logp`` ``[n, T]`` (with grad).
        advantages: unused.
        batch: ``mask``, ``ref_logp`` ``[n, T]``, ``teacher_action_logp`` ``[n, T]``, ``teacher_scored`` ``[n]``.
        beta: ``β > 0``; max_reward: ``c > 0``, the clip of ``|r*|``.
    Returns:
        ``(loss [n, T], metrics)`` with ``inverse_q/optimal_reward`` (mean ``r*`` over the scored actions) and
        ``inverse_q/agreement`` (the fraction of scored actions where ``h`` and ``r*`` have the same sign).
    """
    _check_inverse_q(beta=beta, max_reward=max_reward)
    logp = score.logp.float()
    mask = require(batch, "mask", "objective 'inverse_q'").to(logp)
    ref = require(batch, "ref_logp", "objective 'inverse_q'").to(logp)
    optimal = require(batch, "teacher_action_logp", "objective 'inverse_q'").to(logp)
    scored = require(batch, "teacher_scored", "objective 'inverse_q'").to(logp.device).bool()
    valid = (mask > 0) & scored[:, None]  # [n, T]
    log_ratio = torch.where(valid, logp - ref, 0.0)  # [n, T] h
    target = torch.where(valid, optimal - ref, 0.0).clamp(-max_reward, max_reward).detach()  # [n, T] r*
    label = torch.sigmoid(beta * target)  # [n, T] q
    loss = label * F.softplus(-beta * log_ratio) + (1.0 - label) * F.softplus(beta * log_ratio)  # [n, T]
    loss = torch.where(valid, loss, 0.0)
    with torch.no_grad():
        count = valid.sum().clamp_min(1)
        metrics = {
            "inverse_q/optimal_reward": target[valid].sum() / count,
            "inverse_q/agreement": ((log_ratio * target > 0) & valid).sum() / count,
        }
    return loss, metrics


__all__ = ["inverse_q"]
