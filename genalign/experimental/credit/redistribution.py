"""Reward redistribution over the segments of a chain of thought, with the model's own state values and no extra
generation (rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`; experimental tier)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.experimental.credit.segments import ANSWER_LOGP, ANSWER_MEAN_PROB, per_segment


def redistributed_rewards(values: Tensor, final_reward: Tensor) -> Tensor:
    """``[N, S]`` the terminal reward redistributed over the segments: ``r̃_k = V_{k+1} − V_k`` with the sample's
    own reward in place of the value of its final state ``S_i``, so ``Σ_k r̃_k = R_i − V_0`` (NaN for the segments a
    sample does not have).

    Args:
        values: ``[N, S + 1]`` state values (NaN after a sample's last state).
        final_reward: ``[N]`` the reward of each sample.
    """
    values = values.double()
    present = ~values.isnan()  # [N, S + 1]
    last = (present.long().sum(1) - 1).clamp_min(0)  # [N] S_i
    states = torch.arange(values.shape[1], device=values.device)[None]  # [1, S + 1]
    anchored = torch.where(states == last[:, None], final_reward.double()[:, None], values)  # [N, S + 1]
    gains = anchored[:, 1:] - anchored[:, :-1]  # [N, S]
    return torch.where(states[:, :-1] < last[:, None], gains, torch.nan)  # [N, S]


@CREDIT_RULES.register(
    "reward_redistribution",
    needs=("segment_ids", "answer_probe", "combined_reward", "group_reward_std"),
    replaces=True,
    formula="V_k = P(reference answer | prompt + first k segments) (teacher-forced, no generation), V_{S_i} := R_i; "
    "r̃_ik = V_{k+1} − V_k (Σ_k r̃_ik = R_i − V_0); A_it = r̃_{i,k(t)} / (std_G(R) + ε)",
    source="[154] RREDCoT (reward redistribution for chains of thought)",
    summary="Redistribute the terminal reward over the reasoning segments by the change each causes in the model's "
    "own probability of the correct answer; the segments' credits sum to the reward minus the prompt's value.",
)
def reward_redistribution(
    advantages: Tensor,
    batch: StepBatch,
    *,
    value: Literal["answer_probability", "mean_token_probability"] = "answer_probability",
    normalize: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """RREDCoT [154]: the delayed terminal reward of a chain of thought is redistributed over its segments through
    state values, as return decomposition does (the redistributed reward of a step is the change of the expected
    return it causes, so the expected future reward after every step is 0 and a step's credit is its own). Instead of
    Monte-Carlo continuations, the model itself estimates the value of each segment state: the probability it gives
    the reference answer teacher-forced after the state (``answer_probe``, one forward pass per state, no
    generation). The final state's value is the sample's actual reward, so the segments' credits add up to
    ``R_i − V_0``, GRPO's centred reward with the model's own baseline for the prompt.

    Reading chosen: the value is the answer's sequence probability (``value="mean_token_probability"`` uses the mean
    probability of its tokens instead), which matches a 0/1 correctness reward; the credits are divided by the
    group's reward std (GRPO's scale, and like GRPO a group whose rewards are all equal gets 0; ``normalize=False``
    keeps reward units and credits every group). The segmentation is the rollout's
    ``segment_ids`` (sentences and lines). Unlike ``belief_progress`` [194], which adds the belief change to the
    outcome advantage, this rule replaces the outcome advantage by its redistribution.

    Args:
        advantages: ``[N, T]`` incoming advantages (replaced).
        batch: reads ``segment_ids``, ``answer_probe`` ``[N, S + 1, 3]``, ``combined_reward`` ``[N]``,
            ``group_reward_std`` ``[N]`` (with ``normalize``) and ``mask``.
        value: which channel of the probe is the state value.
        normalize: divide by the group's reward std.
        eps: added to that std.
    Returns:
        ``[N, T]`` per-action advantages (0 on padding).
    """
    if value not in ("answer_probability", "mean_token_probability"):
        raise ValueError(f"value must be 'answer_probability' or 'mean_token_probability', got {value!r}")
    if not eps >= 0:
        raise ValueError(f"reward_redistribution: eps must be >= 0, got {eps!r}")
    probe = batch.require("answer_probe", "credit rule 'reward_redistribution'").detach().double().cpu()
    if probe.ndim != 3 or probe.shape[2] != 3:
        raise ValueError(f"reward_redistribution: answer_probe must be [N, S + 1, 3], got {tuple(probe.shape)}")
    values = probe[..., ANSWER_LOGP].exp() if value == "answer_probability" else probe[..., ANSWER_MEAN_PROB]
    reward = batch.require("combined_reward", "reward_redistribution").detach().double().cpu()  # [N]
    credits = redistributed_rewards(values, reward.nan_to_num(0.0)).nan_to_num(0.0)  # [N, S]
    if normalize:
        spread = batch.require("group_reward_std", "reward_redistribution").detach().double().cpu().nan_to_num(0.0)
        scaled = credits / (spread[:, None] + eps)  # [N, S]
        credits = torch.where(spread[:, None] > 1e-6, scaled, 0.0)  # a group without spread: no signal, as in GRPO
    if credits.shape[1] == 0:
        return torch.zeros_like(advantages)
    segments = batch.require("segment_ids", "credit rule 'reward_redistribution'").long().cpu()
    result = per_segment(credits, segments).to(advantages.device)  # [N, T]
    return torch.where(batch.mask.to(advantages.device) > 0, result, 0.0).to(advantages.dtype)
