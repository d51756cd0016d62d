"""LaSeR [208] in training: the last-token self-rewarding score as an auxiliary reward (a reward shaper of
:data:`REWARD_SHAPERS`). The score is read from the scoring pass before the update: the shaper declares the
vocabulary term ``log softmax(logits)[z]`` (registry meta ``vocab_term``), which the advantage stage hands to that
pass, so the chunked head computes it per action and ``[N, T, V]`` logits never exist. The MSE term that trains the
score is the regulariser ``last_token_self_reward`` (:mod:`genalign.experimental.regularizers.self_reward`)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._validation import check_float_tensor
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.reward_shaping.base import REWARD_SHAPERS
from genalign.experimental.regularizers.self_reward import _check, last_positions, token_logp_term


def _check_bonus(weight: float, fill_missing: bool) -> None:
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight >= 0:
        raise ValueError(f"self_reward_bonus: weight={weight!r} must be a number >= 0 (the weight of the self-reward "
                         "added to the verifier's reward, e.g. 0.5).")  # fmt: skip
    if not isinstance(fill_missing, bool):
        raise ValueError(f"self_reward_bonus: fill_missing={fill_missing!r} must be true or false.")


def bonus_vocab_term(
    logits: Tensor,
    *,
    token_id: int | None = None,
    reference_logp: float | None = None,
    beta: float = 0.1,
    weight: float = 0.5,
    fill_missing: bool = True,
) -> Tensor:
    """``[n]``: ``log πθ(z)`` of each action's next-token logits ``[n, V]`` (:func:`token_logp_term`); the other
    keywords are the shaper's (checked here, so that a bad value fails at config load)."""
    _check_bonus(weight, fill_missing)
    return token_logp_term(logits, token_id=token_id, reference_logp=reference_logp, beta=beta)


def self_reward_scores(vocab: Tensor, mask: Tensor, *, reference_logp: float, beta: float) -> Tensor:
    """``[N]``: ``s_i = β·(ℓ_i − c)`` with ``ℓ_i`` the value of ``vocab`` ``[N, T]`` at each row's last valid action
    of ``mask`` ``[N, T]``; NaN for a row without actions."""
    last = last_positions(mask)  # [N, T]
    logp_z = torch.where(last, vocab, 0.0).sum(1)  # [N]
    return torch.where(last.any(1), beta * (logp_z - reference_logp), torch.nan)


@REWARD_SHAPERS.register(
    "self_reward_bonus",
    needs=("vocab_term",),
    vocab_term=bonus_vocab_term,
    formula="ℓ_i = log πθ(z | x, o_i) where o_i ends (scored before the update, detached); s_i = β·(ℓ_i − c); "
    "r̃_i = r_i + w·s_i; r̃_i = s_i where the verifier gave no reward (fill_missing)",
    source="[208] LaSeR (the self-rewarding score as an auxiliary reward in training)",
    summary="The policy's last-token self-rewarding score, trained by the last_token_self_reward regulariser, added "
    "to the verifier's reward with a weight (and standing in for a missing verifier reward).",
)
def self_reward_bonus(
    rewards: Tensor,
    batch: StepBatch,
    *,
    token_id: int | None = None,
    reference_logp: float | None = None,
    beta: float = 0.1,
    weight: float = 0.5,
    fill_missing: bool = True,
) -> tuple[Tensor, dict[str, float]]:
    """LaSeR [208]: once trained by the MSE term (regulariser ``last_token_self_reward``), the last-token
    self-rewarding score ``s = β·(log πθ(z | x, y) − c)`` estimates the verifier's reward of a solution, and "can
    serve as an auxiliary reward signal in both training and testing". This shaper uses it in training: each
    sample's combined reward gains ``w·s_i`` before the advantage estimator (which normalises it within the group), so
    the samples of a group are ranked by the verifier first and by the policy's own confidence among equals; where
    the verifier gave no reward (NaN, e.g. a prompt without a reference answer) the score stands in for it.

    Reading chosen: the abstract does not give how the score enters training; genalign adds it to the reward with a
    weight ``w`` (0 keeps the verifier's reward and only fills missing ones) and reads ``ℓ_i`` from the scoring pass
    before the update, at the completion's last action, as the regulariser does (its docstring). Use the same
    ``token_id``, ``reference_logp`` and ``beta`` as the regulariser. The score is detached: the shaper moves no
    gradient, the regulariser trains the score.

    Args:
        rewards: ``[N]`` combined rewards (NaN = missing).
        batch: reads ``vocab_term`` ``[N, T]`` (``log πθ(z)`` at each action, from :func:`bonus_vocab_term`) and
            ``mask``.
        token_id: the id of ``z``; reference_logp: ``c`` (nats); beta: ``β > 0``.
        weight: ``w >= 0``.
        fill_missing: a missing reward becomes ``s_i`` (else it stays missing).
    Returns:
        ``(r̃ [N], {"reward_shaping/self_reward_mean"})``.
    """
    _check(token_id, reference_logp, beta)
    _check_bonus(weight, fill_missing)
    rewards = check_float_tensor(rewards, "rewards", "[N]")
    vocab = check_float_tensor(batch.require("vocab_term", "reward shaper 'self_reward_bonus'"), "vocab_term", "[N, T]")
    mask = batch.mask.to(vocab.device)
    if bool(torch.isnan(vocab[last_positions(mask)]).any()):
        raise ValueError(f"self_reward_bonus: token_id={token_id} is outside the policy's vocabulary; give the id of "
                         "a token the tokenizer has.")  # fmt: skip
    scores = self_reward_scores(vocab.detach(), mask, reference_logp=reference_logp, beta=beta)
    scores = scores.to(rewards.device, rewards.dtype)  # [N]
    missing = torch.isnan(rewards)
    shaped = torch.where(missing, scores if fill_missing else rewards, rewards + weight * scores.nan_to_num(0.0))
    present = scores[~torch.isnan(scores)]
    return shaped, {"reward_shaping/self_reward_mean": float(present.mean()) if present.numel() else 0.0}
