"""Token Hidden Reward: each token's first-order influence on the likelihood of the batch's correct responses, and
the reweighting that steers training towards exploitation or exploration (rule of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`; experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


def token_hidden_rewards(
    hidden: Tensor, action_ids: Tensor, probs: Tensor, advantages: Tensor, valid: Tensor, correct: Tensor
) -> Tensor:
    """``[N, T]`` THR_it = A_it·(1 − p_it)·Σ_{(j,s) ≠ (i,t): j correct, o_js = o_it} (1 − p_js)·⟨h_it, h_js⟩.

    The update of token ``(i, t)`` moves the output layer by ``A_it·(e_{o_it} − π_it) h_itᵀ``; its first-order effect
    on ``log π(o_js)`` of a token of a correct response is ``A_it·⟨e_{o_js} − π_js, e_{o_it} − π_it⟩·⟨h_it, h_js⟩``.
    Only pairs with the same sampled token are kept, where the first inner product is ``≈ (1 − p_it)(1 − p_js)``
    for peaked distributions (the cross-token terms need full distributions and are dropped). The sum over the correct
    tokens sharing an id is gathered once per id (``[U, H]`` for the ``U`` distinct ids), so no ``[N T, N T]``
    matrix is formed.

    Args:
        hidden: ``[N, T, H]`` the last hidden state predicting each action.
        action_ids: ``[N, T]`` the sampled token ids.
        probs: ``[N, T]`` their probabilities under the behaviour policy.
        advantages: ``[N, T]`` per-action advantages.
        valid: ``[N, T]`` bool, real actions; correct: ``[N]`` bool, the correct responses.
    """
    h = hidden.float()  # [N, T, H]
    slack = torch.where(valid, 1.0 - probs.float(), 0.0)  # [N, T] 1 − p
    in_correct = valid & correct[:, None]  # [N, T]
    if not bool(in_correct.any()):
        return torch.zeros_like(advantages, dtype=torch.float64)
    ids = action_ids.long()
    known, slot = ids[in_correct].unique(return_inverse=True)  # [U], [n_correct]
    totals = h.new_zeros(known.shape[0], h.shape[-1]).index_add_(
        0, slot, slack[in_correct][:, None] * h[in_correct]
    )  # [U, H] Σ (1 − p_js)·h_js per token id
    place = torch.searchsorted(known, ids).clamp_max(known.shape[0] - 1)  # [N, T]
    others = torch.bincount(slot, minlength=known.shape[0])[place] - in_correct.long()  # [N, T] matches besides itself
    shares_id = valid & (known[place] == ids) & (others > 0)  # [N, T] another correct token has the same id
    influence = torch.zeros_like(slack)  # [N, T]
    for row in range(h.shape[0]):  # one [T, H] gather at a time: no [N, T, H] copy
        pooled = (totals[place[row]] * h[row]).sum(-1)  # [T] Σ over the correct tokens sharing the id
        own = torch.where(in_correct[row], slack[row], 0.0) * h[row].square().sum(-1)  # [T] the token itself
        influence[row] = torch.where(shares_id[row], pooled - own, 0.0)
    return advantages.double() * (slack * influence).double()  # [N, T]


@CREDIT_RULES.register(
    "token_hidden_reward",
    needs=("hidden", "action_ids", "behaviour_logp"),
    formula="THR_it = A_it·(1 − p_it)·Σ_{(j,s)≠(i,t), A_j > 0, o_js = o_it} (1 − p_js)·⟨h_it, h_js⟩; "
    "A_it ← A_it·(1 + ρ·sign(THR_it))",
    source="[270] Token Hidden Reward (THR)-guided reweighting",
    summary="Amplify tokens whose update raises the likelihood of the batch's correct responses and weaken those "
    "that lower it (ρ > 0, exploitation), or the reverse (ρ < 0, exploration).",
)
def token_hidden_reward(advantages: Tensor, batch: StepBatch, *, rho: float = 0.5) -> Tensor:
    """THR-guided reweighting [270]. The Token Hidden Reward of a token is its influence on the likelihood of the
    correct responses under a GRPO step (:func:`token_hidden_rewards`); the reweighting ``A·(1 + ρ·sign(THR))``
    amplifies positive-THR tokens and weakens negative ones with ``ρ > 0`` (favouring exploitation: greedy accuracy)
    and does the reverse with ``ρ < 0`` (favouring exploration: pass@k). Tokens without a matching correct token have
    THR 0 and keep their advantage.

    Reading chosen: the correct responses are the samples with a positive sample advantage; the influence is the
    same-token, output-layer (hidden state) approximation of :func:`token_hidden_rewards` computed over this
    process's batch; and the reweighting uses the sign of THR with one strength ``ρ`` (the abstract gives the
    direction, not the scale).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask``, ``sample_advantages`` (their sign), ``hidden`` ``[N, T, H]``, ``action_ids`` and
            ``behaviour_logp`` ``[N, T]``.
        rho: ``ρ`` in ``[−1, 1]``.
    Returns:
        ``[N, T]`` ``advantages · (1 + ρ·sign(THR))`` (unchanged on padding).
    """
    if not -1 <= rho <= 1:
        raise ValueError(f"token_hidden_reward needs rho in [-1, 1] (weights stay >= 0), got {rho!r}")
    device = advantages.device
    valid = batch.mask.to(device) > 0  # [N, T]
    hidden = batch.require("hidden", "token_hidden_reward").detach().to(device)  # [N, T, H]
    ids = batch.require("action_ids", "token_hidden_reward").to(device)  # [N, T]
    logp = batch.require("behaviour_logp", "token_hidden_reward").detach().to(device)  # [N, T]
    probs = torch.where(valid, logp, 0.0).double().exp().clamp_max(1.0)  # [N, T]
    correct = batch["sample_advantages"].to(device) > 0  # [N]
    thr = token_hidden_rewards(hidden, ids, probs, advantages.detach(), valid, correct)  # [N, T]
    weights = torch.where(valid, 1.0 + rho * torch.sign(thr), 1.0)  # [N, T]
    return advantages * weights.to(advantages.dtype)  # [N, T]
