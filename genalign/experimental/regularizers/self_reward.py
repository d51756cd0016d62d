"""LaSeR [208]: the last-token self-reward and the MSE loss that aligns it with the verifier's reward, as a regulariser
whose per-token math (the log-probability of one pre-specified token) runs inside the policy's chunked head pass."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._validation import check_float_tensor
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.regularizers.base import REGULARIZERS, valid_mask
from genalign.algorithms.scores import ScoreOutput


def _check(token_id: int | None, reference_logp: float | None, beta: float) -> int:
    if token_id is None or isinstance(token_id, bool) or not isinstance(token_id, int) or token_id < 0:
        raise ValueError(f"last_token_self_reward: token_id={token_id!r}; give the id (>= 0) of the pre-specified token "
                         "whose log-probability is the self-reward, e.g. a special token the model never writes.")  # fmt: skip
    if reference_logp is None:
        raise ValueError("last_token_self_reward: reference_logp is required: the reference model's log-probability "
                         "of token_id after a solution (LaSeR's pre-calculated constant, e.g. -23.0).")  # fmt: skip
    if not beta > 0:
        raise ValueError(f"last_token_self_reward: beta={beta!r} must be > 0 (the KL coefficient of the self-reward).")
    return token_id


def token_logp_term(
    logits: Tensor,
    *,
    token_id: int | None = None,
    reference_logp: float | None = None,
    beta: float = 0.1,
    reward_column: int = 0,
) -> Tensor:
    """``[n]``: ``log softmax(logits)[token_id]`` of each action's next-token logits ``[n, V]`` (with grad); NaN when
    the vocabulary has no ``token_id`` (the regulariser then names it). The other keywords are the regulariser's."""
    token_id = _check(token_id, reference_logp, beta)
    logits = check_float_tensor(logits, "last_token_self_reward logits", "[n, V]")
    if token_id >= logits.shape[-1]:
        return logits.new_full(logits.shape[:-1], torch.nan)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return logits[..., token_id] - torch.logsumexp(logits, dim=-1)  # [n]


def last_positions(mask: Tensor) -> Tensor:
    """``[N, T]`` bool: the last valid action of each row (none for a row without one)."""
    valid = mask > 0
    counted = valid.long().cumsum(1)
    return valid & (counted == valid.long().sum(1, keepdim=True))


@REGULARIZERS.register(
    "last_token_self_reward",
    needs=("vocab_term", "rewards"),
    vocab_term=token_logp_term,
    formula="ℓ_i = log πθ(z | x, o_i) read where o_i ends (the next-token distribution of its last action); "
    "s_i = β·(ℓ_i − c); L_it = (s_i − r_i)² on every valid action of o_i (r = the verifier's reward column)",
    source="[208] LaSeR",
    summary="Last-token self-rewarding: the policy's log-probability of a pre-specified token at the end of its "
    "solution, scaled by β around a reference constant, is regressed onto the verifier's reward by an MSE term.",
)
def last_token_self_reward(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    token_id: int | None = None,
    reference_logp: float | None = None,
    beta: float = 0.1,
    reward_column: int = 0,
) -> Tensor:
    """LaSeR [208]: the closed-form solution of the self-verification RL objective reduces the true reasoning reward
    of a solution to its *last-token self-rewarding score*, ``s = β·(log πθ(z | x, y) − c)``: the policy's
    next-token log-probability of a pre-specified token ``z`` at the solution's last token, minus a pre-computed
    constant ``c`` (the reference model's log-probability of ``z`` there), scaled by the KL coefficient ``β``. LaSeR
    adds to the RLVR loss an MSE that aligns ``s`` with the verifier's reward, so one policy both reasons and scores
    itself at the cost of one extra token. Weight the term with ``algorithm.regularizer_coef``.

    Reading chosen: "the next-token distribution at the solution's last token" is read from the scoring pass at the
    completion's last action: the distribution that predicted it (for a completion ending in the end-of-sequence
    token: the distribution after the solution text, where the model decides to stop), so no extra position is
    scored. ``z`` and ``c`` have no default (they depend on the tokenizer and the model). The loss is written on every
    valid action (``seq_mean_token_mean`` aggregates it to ``mean_i (s_i − r_i)²``); its gradient reaches
    ``log πθ(z)`` at the last action only. The self-reward is not yet used to re-weight advantages or at test time.

    Args:
        score: ``vocab_term`` ``[N, T]`` (grad): ``log πθ(z)`` at each action (:func:`token_logp_term`).
        advantages: unused.
        batch: reads ``mask`` and ``rewards`` ``[N, K]``.
        token_id: the id of ``z`` in the policy's vocabulary.
        reference_logp: ``c``, nats.
        beta: ``β > 0``.
        reward_column: the raw reward column of the verifier (a missing reward adds no loss).
    Returns:
        ``[N, T]`` non-negative loss (0 on padding).
    """
    _check(token_id, reference_logp, beta)
    mask = valid_mask(score, batch)
    vocab = check_float_tensor(score.require("vocab_term", "last_token_self_reward"), "score['vocab_term']", "[N, T]")
    last = last_positions(mask)  # [N, T]
    if bool(torch.isnan(vocab[last]).any()):
        raise ValueError(f"last_token_self_reward: token_id={token_id} is outside the policy's vocabulary; give the id "
                         "of a token the tokenizer has.")  # fmt: skip
    table = batch.require("rewards", "regularizer 'last_token_self_reward'").to(vocab.device)  # [N, K]
    if not -table.shape[1] <= reward_column < table.shape[1]:
        raise ValueError(f"last_token_self_reward: reward_column={reward_column} is not one of the {table.shape[1]} "
                         "rewards (0-based).")  # fmt: skip
    logp_z = torch.where(last, vocab, 0.0).sum(1)  # [N] ℓ_i (0 for a sample without actions)
    target = table[:, reward_column].to(vocab.dtype)  # [N]
    present = ~torch.isnan(target) & last.any(1)
    error = torch.where(present, beta * (logp_z - reference_logp) - target.nan_to_num(0.0), 0.0)  # [N]
    return torch.where(mask > 0, error.square()[:, None].expand_as(mask), 0.0)  # [N, T]
