"""What a regulariser reads, built from plain tensors for the regulariser tests: ``(score, advantages, batch)``."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms import ScoreOutput, StepBatch


def regularizer_inputs(
    *,
    logp: Tensor,
    mask: Tensor,
    old_logp: Tensor | None = None,
    advantages: Tensor | None = None,
    entropy: Tensor | None = None,
    kl: Tensor | None = None,
    vocab: Tensor | None = None,
    group_mean_reward: Tensor | None = None,
) -> tuple[ScoreOutput, Tensor, StepBatch]:
    """The score of a pass (``logp`` with the features ``entropy``, ``kl``, ``vocab_term``), the advantages ``[N]``
    (zeros when not given) and the step batch (``mask``, ``old_logp``, ``group_mean_reward``)."""
    score = ScoreOutput(logp, {"entropy": entropy, "kl": kl, "vocab_term": vocab})
    advantages = torch.zeros(logp.shape[0]) if advantages is None else advantages
    return score, advantages, StepBatch(mask=mask, old_logp=old_logp, group_mean_reward=group_mean_reward)
