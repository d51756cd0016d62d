"""Entropy regularisers (method catalogue II): entropy minimisation on self-generated outputs (EM-FT [42]) and the
entropy band of G²RPO's entropy shaping [65]. Registered in :data:`~genalign.algorithms.regularizers.base.REGULARIZERS`;
both read the per-action entropy of the scoring pass with its gradient (score feature ``entropy``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.regularizers.base import REGULARIZERS, valid_mask
from genalign.algorithms.scores import ScoreOutput


@REGULARIZERS.register(
    "entropy_minimization",
    needs=("entropy",),
    formula="L_it = H(πθ(·|o_<t))_it on the model's own samples (EM-FT); minimised with regularizer_coef",
    source="[42] Entropy minimisation (EM-FT)",
    summary="Minimise the token entropy of the model's own outputs (label-free EM-FT); next to an RL objective it "
    "sharpens the policy.",
)
def entropy_minimization(score: ScoreOutput, advantages: Tensor, batch: StepBatch) -> Tensor:
    """EM-FT [42]: the loss is the token-level entropy ``H(πθ(·|o_{<t}))`` of outputs sampled from the model itself,
    so minimising it concentrates probability on the model's most confident continuations (no labels). With
    ``aggregation: token_mean`` the aggregated term is EM-FT's mean token entropy; ``regularizer_coef`` weighs it
    against the policy loss. (A positive ``algorithm.entropy_coef`` is the opposite, an entropy *bonus*.)

    Args:
        score, advantages, batch: read ``entropy`` ``[N, T]`` with its gradient (the policy's scoring pass) and ``mask``.
    Returns:
        ``[N, T]`` the entropy on valid actions, 0 on padding (grad through the entropy).
    """
    mask = valid_mask(score, batch)
    entropy = score.require("entropy", "entropy_minimization")
    return torch.where(mask > 0, entropy.to(mask.dtype), 0.0)  # [N, T]
