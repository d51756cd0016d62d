"""Token rewards from a generative reward model that rewrites the sample with minimal edits (RLMEC [225],
experimental tier).

The teacher is the generative reward model (GRM), trained to rewrite an erroneous solution into a correct one with as
few edits as possible; it sees the problem, the reference solution and the sample's own solution in its context and
scores the sample's tokens as the start of its rewrite: ``algorithm.teacher: {source: model, model: GRM, context:
"\\nCorrect solution: {solution}\\nPrediction: {sample.completion}\\nCorrect prediction:"}``
(:mod:`genalign.teachers.context`). A token the GRM would copy into its rewrite gets a high probability ``p_t``; a
token it would edit, a low one: the key tokens of an erroneous solution.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.experimental.credit.distillation import _check_mixing, _with_check, selected_samples


def _check(
    *, coef: float = 1.0, reward_weight: float = 1.0, center: float = 0.5, correct_max: float = 0.5,
    incorrect_min: float = -0.1, **_,
) -> None:  # fmt: skip
    _check_mixing(coef=coef, reward_weight=reward_weight)
    if not (0 <= center <= 1 and correct_max >= 0 and incorrect_min <= 0):
        raise ValueError(
            f"minimum_edit_reward: need center in [0, 1], correct_max >= 0 and incorrect_min <= 0; got center={center!r}"
            f", correct_max={correct_max!r}, incorrect_min={incorrect_min!r}"
        )


@CREDIT_RULES.register(
    "minimum_edit_reward",
    needs=("teacher_action_logp", "teacher_scored", "rewards"),
    bind=_with_check(_check, "minimum_edit_reward"),
    formula="p_t = π_GRM(o_t | x, solution, o, o_<t); r_t = clip(p_t − c, 0, r_max) (correct i) or "
    "clip(p_t − c, r_min, 0) (incorrect i); A_it = w_r·A_it + coef·r_it",
    source="[225] RLMEC (token rewards of a minimum-edit generative reward model; the published code's clips)",
    summary="Token rewards from a generative reward model that rewrites the sample with minimal edits: the tokens it "
    "would change are penalised in incorrect samples, the ones it keeps rewarded in correct samples.",
)
def minimum_edit_reward(
    advantages: Tensor,
    batch: StepBatch,
    *,
    coef: float = 1.0,
    reward_weight: float = 1.0,
    center: float = 0.5,
    correct_max: float = 0.5,
    incorrect_min: float = -0.1,
    success_column: int = 0,
    success_threshold: float = 0.0,
) -> Tensor:
    """RLMEC [225]: the GRM's probability ``p_t`` of each sampled token, read as the start of its minimum-edit
    rewrite of the sample (module docstring), becomes a token reward: ``clip(p_t − center, 0, correct_max)`` in a
    correct sample (reward in ``success_column`` above ``success_threshold``) and ``clip(p_t − center, incorrect_min,
    0)`` in an incorrect one (the published data script's clips: 0.5, 0.5 and −0.1), so only the key tokens the GRM
    would edit are penalised. ``A_it = w_r·A_it + coef·r_it`` on the samples the teacher scored.

    Reading chosen: RLMEC trains with a token-weighted likelihood objective on those rewards plus an imitation term on
    the GRM's rewrite; here the rewards join the group-relative advantage through the ratio, and the imitation term
    (it needs the GRM to generate the rewrite) is not built.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``teacher_action_logp``, ``teacher_scored``, ``rewards``, ``mask``.
        coef: ``>= 0``; reward_weight: ``>= 0``; center: ``c`` in ``[0, 1]``; correct_max: ``r_max >= 0``;
        incorrect_min: ``r_min <= 0``; success_column, success_threshold: which samples are correct.
    Returns:
        ``[N, T]`` advantages.
    """
    _check(coef=coef, reward_weight=reward_weight, center=center, correct_max=correct_max, incorrect_min=incorrect_min)
    rule, device = "credit rule 'minimum_edit_reward'", advantages.device
    probability = batch.require("teacher_action_logp", rule).to(device).float().exp()  # [N, T]
    scored = (batch.mask.to(device) > 0) & batch.require("teacher_scored", rule).to(device)[:, None]  # [N, T]
    correct = selected_samples(batch, "correct", success_column, success_threshold, rule, device)  # [N, 1]
    shifted = probability - center
    token_rewards = torch.where(correct, shifted.clamp(0.0, correct_max), shifted.clamp(incorrect_min, 0.0))
    return reward_weight * advantages + coef * torch.where(scored, token_rewards, 0.0).to(advantages.dtype)
