"""Response-level credit: advantages rescaled by the response's surprisal (AEM [231]), shifted by its length
relative to the group (G²RPO's length shaping [65]), or replaced by negative entropy as the only reward (EM-RL [42]).
Rules of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`.

Each rule works on whole responses: one number per sample ``[N]`` from the sample's actions, written on every valid
action. Statistics are taken once over the rollout batch of the process, before it is split into micro-batches.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms._groups import group_stats, group_sum, make_groups
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


def _valid(batch: StepBatch, like: Tensor) -> Tensor:
    return batch.mask.to(like.device) > 0  # [N, T]


def _sequence_mean(values: Tensor, valid: Tensor) -> Tensor:
    """``[N, T] -> [N]`` masked mean (0 for a sample without valid actions)."""
    return torch.where(valid, values, 0.0).sum(1) / valid.sum(1).clamp_min(1)


def _group_mean(values: Tensor, include: Tensor, group_ids: Tensor) -> Tensor:
    """Mean of ``values`` ``[N]`` over the included members of each sample's group, broadcast to ``[N]``."""
    groups = make_groups(group_ids.to(values.device), values.shape[0], min_size=1)
    stacked = torch.stack([torch.where(include, values, 0.0), include.to(values.dtype)], 1)  # [N, 2]
    sums = group_sum(stacked, groups)  # [G, 2]
    return (sums[:, 0] / sums[:, 1].clamp_min(1.0))[groups.index]  # [N]


# ------------------------------------------------------------------------------------------------------------ AEM
def check_aem_weights(power: float, weight_min: float, weight_max: float, eps: float) -> None:
    """The hyper-parameters of AEM's confidence weights (``aem``, ``aem_turns``), or an error naming them."""
    if not (power >= 0 and 0 <= weight_min <= 1 <= weight_max and eps > 0):
        raise ValueError(
            f"need power >= 0, 0 <= weight_min <= 1 <= weight_max and eps > 0, got power={power!r}, "
            f"weight_min={weight_min!r}, weight_max={weight_max!r}, eps={eps!r}"
        )


@CREDIT_RULES.register(
    "aem",
    needs=("behaviour_logp",),
    formula="u_i = −mean_t logπ_old(o_it) (response surprisal); w_i = clamp((mean_G u / u_i)^γ, w_min, w_max); "
    "A_it ← w_i·A_it",
    source="[231] AEM",
    summary="Response-level entropy modulation: advantages rescaled by the response's relative confidence, so "
    "negatives (dominant early) raise entropy and positives (dominant late) lower it.",
)
def aem(
    advantages: Tensor,
    batch: StepBatch,
    *,
    power: float = 1.0,
    weight_min: float = 0.5,
    weight_max: float = 2.0,
    eps: float = 1e-6,
) -> Tensor:
    """AEM [231]: under natural-gradient updates the response-level entropy drifts by ``ΔH ∝ Σ_i A_i (u_i − ū)``,
    the product of a sample's advantage and its relative surprisal ``u_i − ū`` (``u_i = −log π(o_i)`` per token).
    Rescaling each advantage by the response's relative *confidence* ``ū/u_i`` gives, for a positive sample, most
    weight to confident responses (entropy falls: exploitation) and, for a negative sample, most weight to confident
    mistakes (pushing them down raises entropy: exploration). The net drift follows the balance of positive and
    negative samples: exploration while failures dominate, exploitation as successes take over.

    Reading chosen: the abstract names "a practical response-level uncertainty proxy" without its form. genalign takes
    the length-normalised surprisal of the behaviour policy ``u_i = −mean_t logπ_old(o_{i,t})``, the group mean ``ū``
    over samples with actions, ``w_i = clamp((ū / u_i)^γ, w_min, w_max)`` (``γ = 1``; the clamp keeps one very confident
    response from dominating), multiplying every action's advantage.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``behaviour_logp``, ``mask`` and ``group_ids``.
        power: ``γ >= 0`` (0 = no rescaling).
        weight_min, weight_max: clamp of the weights, ``0 <= w_min <= 1 <= w_max``.
        eps: floor of the surprisal before dividing.
    Returns:
        ``[N, T]`` ``w_i · advantages``.
    """
    check_aem_weights(power, weight_min, weight_max, eps)
    logp = batch.require("behaviour_logp", "aem").detach().to(advantages.device, advantages.dtype)  # [N, T]
    valid = _valid(batch, advantages)  # [N, T]
    has_actions = valid.any(1)  # [N]
    surprisal = (-_sequence_mean(logp, valid)).clamp_min(eps)  # [N] u_i
    mean_surprisal = _group_mean(surprisal, has_actions, batch.group_ids)  # [N] ū
    weight = (mean_surprisal / surprisal).pow(power).clamp(weight_min, weight_max)  # [N]
    return advantages * torch.where(has_actions, weight, 1.0)[:, None]  # [N, T]


# ------------------------------------------------------------------------------------------- G²RPO length shaping
@CREDIT_RULES.register(
    "length_shaping",
    needs=("rewards",),
    formula="p_q = share of correct samples; d_q = +1 if p_q < threshold (complex query) else −1; "
    "z_i = (|o_i| − mean_G|o|)/(std_G|o| + eps); correct i: A_it ← A_it + λ·d_q·z_i",
    source="[65] G²RPO (response length shaping)",
    summary="Task-level length shaping: among correct responses, longer ones gain on hard queries (extended "
    "reasoning), shorter ones on easy queries (direct answers).",
)
def length_shaping(
    advantages: Tensor,
    batch: StepBatch,
    *,
    coef: float = 0.1,
    difficulty_threshold: float = 0.5,
    success_column: int = 0,
    success_threshold: float = 0.5,
    eps: float = 1e-6,
) -> Tensor:
    """G²RPO's response length shaping [65]: "dynamically elicits extended reasoning chains for complex queries while
    enforcing direct outputs" for perception-like ones, on top of the Gaussianised advantage (``advantage:
    gaussianized``).

    Reading chosen: the abstract gives no formula and genalign has no task labels, so the *query's* difficulty decides
    the direction: ``p_q`` is the share of correct responses in the group (reward column ``success_column`` above
    ``success_threshold``); a query with ``p_q < difficulty_threshold`` is complex (``d_q = +1``: longer correct
    responses gain), otherwise direct (``d_q = −1``: shorter ones gain). The shaping is additive on correct
    responses only, ``λ·d_q·z_i`` with ``z_i`` the response length z-scored within its group (population std), so it
    also reaches all-correct groups, whose GRPO advantage is 0; incorrect responses keep their advantage.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``rewards`` ``[N, K]``, ``mask`` and ``group_ids``.
        coef: ``λ >= 0``.
        difficulty_threshold: success rate below which a query counts as complex, in ``[0, 1]``.
        success_column: reward column that says whether a response is correct.
        success_threshold: a response is correct when that reward exceeds it.
        eps: added to the length std.
    Returns:
        ``[N, T]`` shaped per-action advantages.
    """
    if not (coef >= 0 and 0 <= difficulty_threshold <= 1 and eps > 0):
        raise ValueError(f"need coef >= 0, difficulty_threshold in [0, 1] and eps > 0, got {coef!r}, "
                         f"{difficulty_threshold!r}, {eps!r}")  # fmt: skip
    rewards = batch.require("rewards", "length_shaping")  # [N, K]
    if not -rewards.shape[1] <= success_column < rewards.shape[1]:
        raise ValueError(
            f"length_shaping: success_column={success_column} is not one of the {rewards.shape[1]} rewards"
        )
    column = rewards[:, success_column].to(advantages.device, advantages.dtype)  # [N]
    correct = ~torch.isnan(column) & (column > success_threshold)  # [N]
    valid = _valid(batch, advantages)  # [N, T]
    lengths = valid.sum(1).to(advantages.dtype)  # [N]
    groups = make_groups(batch.group_ids.to(advantages.device), lengths.shape[0], min_size=1)
    stats = group_stats(lengths[:, None], groups, unbiased=False)  # [G, 1]
    z = (lengths - stats.mean[groups.index, 0]) / (stats.std[groups.index, 0] + eps)  # [N]
    success_rate = _group_mean(correct.to(advantages.dtype), torch.ones_like(correct), batch.group_ids)  # [N] p_q
    direction = torch.where(success_rate < difficulty_threshold, 1.0, -1.0).to(advantages.dtype)  # [N] d_q
    shift = torch.where(correct, coef * direction * z, 0.0)  # [N]
    return torch.where(valid, advantages + shift[:, None], advantages)  # [N, T]


# ------------------------------------------------------------------------------------------------------------ EM-RL
@CREDIT_RULES.register(
    "entropy_reward",
    needs=("entropy",),
    replaces=True,
    formula="r_i = −Σ_t H_it (token) or Σ_t logπ_old(o_it) (sequence); A_i = (r_i − mean_G r)/(std_G r + eps) "
    "on every action; the task reward is ignored",
    source="[42] Entropy minimisation (EM-RL)",
    summary="Label-free RL: negative entropy is the only reward, normalised within the group.",
)
def entropy_reward(
    advantages: Tensor,
    batch: StepBatch,
    *,
    level: Literal["token", "sequence"] = "token",
    eps: float = 1e-6,
) -> Tensor:
    """EM-RL [42]: reinforcement learning with the negative entropy of the model's own output as the only reward, no
    labels. ``level="token"``: ``r_i = −Σ_t H(π(·|o_{<t}))`` (the sum of token entropies from a scoring pass before
    the update); ``level="sequence"``: ``r_i = log π_old(o_i) = Σ_t logπ_old(o_{i,t})`` (a one-sample estimate of
    the negative trajectory entropy). The incoming (task) advantages are discarded: put this rule first.

    Reading chosen: the abstract fixes the reward but not the estimator; genalign normalises it within the group as
    GRPO does (``(r − mean_G r) / (std_G r + eps)``, unbiased std), and writes the sample's advantage on every action.

    Args:
        advantages: ``[N, T]`` (ignored).
        batch: reads ``entropy`` (``token``) or ``behaviour_logp`` (``sequence``), ``mask`` and ``group_ids``.
        level: ``"token"`` or ``"sequence"``.
        eps: added to the group std.
    Returns:
        ``[N, T]`` per-action advantages (0 on padding).
    """
    if level not in ("token", "sequence"):
        raise ValueError(f"level must be 'token' or 'sequence', got {level!r}")
    feature = "entropy" if level == "token" else "behaviour_logp"
    values = batch.require(feature, "entropy_reward").detach().to(advantages.device, advantages.dtype)  # [N, T]
    valid = _valid(batch, advantages)  # [N, T]
    summed = torch.where(valid, values, 0.0).sum(1)  # [N]
    reward = -summed if level == "token" else summed  # [N]
    groups = make_groups(batch.group_ids.to(advantages.device), reward.shape[0])
    stats = group_stats(reward[:, None], groups, unbiased=True)  # [G, 1]
    sample = (reward - stats.mean[groups.index, 0]) / (stats.std[groups.index, 0] + eps)  # [N]
    return torch.where(valid, sample[:, None].expand_as(advantages), 0.0)  # [N, T]
