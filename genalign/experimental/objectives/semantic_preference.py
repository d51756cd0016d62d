"""Sem-DPO [51]: DPO on pairs formed inside each group by reward, each pair's loss scaled by how semantically close its
winning sample stayed to the prompt (experimental tier: the embedding is genalign's, see
:mod:`genalign.rewards.semantic`).

The similarity ``s_i = cos(e(x), e(y_i))`` is a reward column (the batch's ``rewards``, one column per configured
reward, in config order): configure ``prompt_similarity`` (or any similarity reward in ``[−1, 1]``) with ``weight: 0``
so that it does not move the preference pairs, and name its position in ``similarity_column``. Pairs and their
placement come from :mod:`~genalign.algorithms.objectives.preference_pairs` (``whole_groups``,
``aggregation="seq_mean_token_mean"``). ``n`` samples, ``P`` pairs, ``T`` actions, ``K`` rewards.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.objectives.base import OBJECTIVES, checked_binding
from genalign.algorithms.objectives.preference import PREFERENCE_META, check_beta
from genalign.algorithms.objectives.preference_pairs import (
    PairSelection,
    bradley_terry_loss,
    check_pair_options,
    pair_metrics,
    pairs_on_actions,
    preference_inputs,
    summed_log_ratio,
)
from genalign.algorithms.scores import ScoreOutput


def semantic_weights(similarity: Tensor, alpha: float) -> Tensor:
    """Sem-DPO's weight ``W = exp(−α·(1 − s))`` ``[P]`` of the winners' similarities ``s`` ``[P]`` (cosine distance
    ``1 − s``); a missing similarity (NaN) counts as distance 1."""
    distance = torch.where(torch.isnan(similarity), 1.0, 1.0 - similarity)  # [P]
    return torch.exp(-alpha * distance)


def _check_sem_dpo(*, beta: float, alpha: float, similarity_column: int, pairs: str, min_gap: float) -> None:
    check_beta(beta, "sem_dpo", "DPO uses 0.1")
    if not alpha >= 0:
        raise ValueError(f"alpha={alpha!r} must be >= 0 (how fast the weight falls with semantic drift, e.g. 1.0).")
    if isinstance(similarity_column, bool) or not isinstance(similarity_column, int):
        raise ValueError(
            f"similarity_column={similarity_column!r} must be the integer position of the similarity reward in "
            "rewards (e.g. 1 for the second reward)."
        )
    check_pair_options(pairs, min_gap)


@OBJECTIVES.register(
    "sem_dpo",
    uses_old_logp=False,
    bind=checked_binding("sem_dpo", _check_sem_dpo),
    **{**PREFERENCE_META, "needs": (*PREFERENCE_META["needs"], "rewards")},
    formula="h_i = Σ_t (logπθ − logπref); s_w = rewards[w, similarity_column] = cos(e(x), e(y_w)); "
    "W_p = exp(−α(1 − s_w)); ℓ_p = −W_p·log σ(β(h_w − h_l)); L = mean_q mean_{p∈q} ℓ_p",
    source="[51] Sem-DPO (the DPO loss scaled by an exponential weight of the cosine distance between the prompt and "
    "the winning sample); reading chosen: the embedding is a hashed n-gram bag (reward prompt_similarity), not a "
    "sentence encoder",
    summary="DPO on group pairs whose loss is down-weighted when the winning sample drifted semantically from the "
    "prompt, so pairs that reward a change of meaning teach less.",
)
def sem_dpo(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    beta: float = 0.1,
    alpha: float = 1.0,
    similarity_column: int = 1,
    pairs: PairSelection = "all",
    min_gap: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Sem-DPO [51]: ``ℓ = −W(x, y_w) · log σ(β · [(logπθ(y_w) − logπref(y_w)) − (logπθ(y_l) − logπref(y_l))])``
    with ``W = exp(−α · d(x, y_w))`` and the cosine distance ``d = 1 − cos(e(x), e(y_w))`` of the prompt and the
    winning sample in an embedding space: a winner that changed the prompt's meaning weighs less, which bounds the
    semantic drift of the trained prompt generator. ``W`` is a constant of the loss (the similarity is a reward).

    Reading chosen: the abstract gives the weight's form, not ``α`` (default 1) nor the encoder; the similarity is
    the reward column ``similarity_column`` (``prompt_similarity``: hashed character n-grams and words, no model),
    and a missing similarity counts as the largest distance, 1.

    Args:
        score: ``logp`` ``[n, T]`` (with grad).
        advantages: unused (the pairs come from ``combined_reward``).
        batch: ``mask``, ``group_ids``, ``combined_reward`` ``[n]``, ``rewards`` ``[n, K]``, ``ref_logp`` ``[n, T]``.
        beta: ``β > 0``; alpha: ``α >= 0`` (0 is DPO); similarity_column: the similarity reward's column of
            ``rewards`` (negative counts from the end).
        pairs: ``"all"`` or ``"best_worst"``; min_gap: the reward gap a pair needs.
    Returns:
        ``(loss [n, T], metrics)`` with ``sem_dpo/pairs``, ``sem_dpo/ordered_pairs``, ``sem_dpo/margin`` and
        ``sem_dpo/weight`` (the mean ``W`` over the pairs).
    """
    _check_sem_dpo(beta=beta, alpha=alpha, similarity_column=similarity_column, pairs=pairs, min_gap=min_gap)
    inputs = preference_inputs(score, batch, "sem_dpo", selection=pairs, min_gap=min_gap)
    found, logp = inputs.pairs, inputs.logp
    table = require(batch, "rewards", "objective 'sem_dpo'")  # [n, K]
    if not -table.shape[1] <= similarity_column < table.shape[1]:
        raise ValueError(
            f"sem_dpo: similarity_column={similarity_column} is not a reward column; the config has "
            f"{table.shape[1]} reward(s): add the similarity reward (e.g. prompt_similarity with weight 0) or fix it."
        )
    similarity = table[:, similarity_column].to(device=logp.device, dtype=logp.dtype)  # [n]
    weight = semantic_weights(similarity[found.chosen], alpha)  # [P]
    implicit = summed_log_ratio(logp, inputs.ref_logp, inputs.mask)  # [n] h_i
    logits = beta * (implicit[found.chosen] - implicit[found.rejected])  # [P]
    loss = pairs_on_actions(weight * bradley_terry_loss(logits), found, inputs.mask)  # [n, T]
    metrics = pair_metrics("sem_dpo", logits, found)
    metrics["sem_dpo/weight"] = weight.detach().mean() if found.num_pairs else torch.tensor(1.0)
    return loss, metrics


__all__ = ["sem_dpo", "semantic_weights"]
