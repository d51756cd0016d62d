"""LaSeR's self-rewarding score at test time [208]: score sampled completions with the trained policy's own
last-token self-reward and keep the best of each prompt's ``n`` (inference; the score is trained by the regulariser
``last_token_self_reward`` and used in training by the shaper ``self_reward_bonus``).

The score of a completion is ``s = β·(log π(z | x, y_{<L}) − c)``: the log-probability of the pre-specified token
``z`` under the next-token distribution that predicted the completion's last token (for a completion ending in the
end-of-sequence token: the distribution after the solution text), the same position the training pass reads, so one
forward pass over prompt and completion scores it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


@torch.no_grad()
def self_reward_scores(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    token_id: int,
    reference_logp: float,
    beta: float,
) -> Tensor:
    """``[B]`` self-rewarding scores of completions under ``model`` (a causal LM returning ``.logits``).

    Args:
        prompt_ids, prompt_mask: ``[B, P]`` left-padded prompts.
        completion_ids, completion_mask: ``[B, L]`` right-padded completions (each with at least one token).
        token_id: the id of ``z``; reference_logp: ``c``; beta: ``β > 0`` (as in training).
    """
    lengths = completion_mask.long().sum(1)  # [B]
    if bool((lengths < 1).any()) or not beta > 0:
        raise ValueError("self_reward_scores: every completion needs a token and beta must be > 0.")
    ids = torch.cat([prompt_ids, completion_ids], 1)  # [B, P + L]
    mask = torch.cat([prompt_mask, completion_mask], 1).long()
    positions = (mask.cumsum(1) - 1).clamp_min(0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits  # [B, P + L, V]
    if not 0 <= token_id < logits.shape[-1]:
        raise ValueError(f"self_reward_scores: token_id={token_id} is outside the model's {logits.shape[-1]} ids.")
    last = prompt_ids.shape[1] + lengths - 2  # [B] the position whose distribution predicted the last token
    rows = torch.arange(ids.shape[0], device=ids.device)
    logp_z = torch.log_softmax(logits[rows, last].float(), -1)[:, token_id]  # [B]
    return beta * (logp_z - reference_logp)


def best_of_n(scores: Tensor, n: int) -> Tensor:
    """``[B / n]`` the index (into the ``B`` completions, ``n`` consecutive ones per prompt) of each prompt's highest
    score; the earliest wins a tie."""
    if n < 1 or scores.shape[0] % n:
        raise ValueError(f"best_of_n: {scores.shape[0]} scores do not split into groups of n={n}.")
    grouped = scores.view(-1, n)  # [B / n, n]
    return grouped.argmax(1) + torch.arange(grouped.shape[0], device=scores.device) * n
