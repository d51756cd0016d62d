"""EGSPO's SFT loss [84]: the NLL of the expert demonstrations that the sample source ``expert_warmup``
(:mod:`genalign.experimental.sampling.expert_warmup`) adds to the first steps and flags ``expert_demo``; also the
forward-KL loss on the teacher rollouts ``teacher_sft`` flags ([72], [88])."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.regularizers.base import REGULARIZERS, valid_mask
from genalign.algorithms.scores import ScoreOutput
from genalign.algorithms.signals import declare_signal

#: per-sample flag: an expert demonstration a sample source added for supervised training
EXPERT_DEMO = "expert_demo"
declare_signal(EXPERT_DEMO, ("N",), "source",
               "1 for an expert demonstration a sample source added for supervised training (EGSPO's warm-up, a "
               "teacher rollout of teacher_sft), else 0.",
               dtype="bool", source="[84] EGSPO")  # fmt: skip


@REGULARIZERS.register(
    "expert_nll",
    needs=(EXPERT_DEMO,),
    formula="L_it = −log πθ(o_it) on the expert demonstrations (expert_demo), 0 elsewhere; weight regularizer_coef",
    source="[84] EGSPO (the SFT loss of stage 1, with the sample source expert_warmup)",
    summary="Supervised NLL on the expert demonstrations a sample source added (EGSPO's SFT warm-up); 0 on the "
    "policy's own samples.",
)
def expert_nll(score: ScoreOutput, advantages: Tensor, batch: StepBatch) -> Tensor:
    """EGSPO's stage-1 SFT loss [84]: ``−log πθ`` of every action of the samples flagged ``expert_demo``.

    Reading chosen: the abstract's stage 1 is a separate pure-SFT training; here its loss is a regulariser of the RL
    run (weight ``algorithm.regularizer_coef``, aggregated like the policy loss), so it trains whatever the sample
    source flags and is 0 once the warm-up adds nothing.

    Args:
        score: ``logp`` ``[N, T]`` (grad). advantages: unused.
        batch: reads ``mask`` and ``expert_demo`` ``[N]`` bool.
    Returns:
        ``[N, T]`` ``−log πθ`` on the demonstrations' valid actions, 0 elsewhere.
    """
    mask = valid_mask(score, batch)
    demo = batch.require(EXPERT_DEMO, "regularizer 'expert_nll'").to(mask.device).bool()  # [N]
    return torch.where(demo[:, None] & (mask > 0), -score.logp, 0.0)  # [N, T]
