"""VERL [2]: exploration and exploitation read from the effective rank of a response's hidden states and its
derivatives along the response, turned into a bounded advantage bonus (experimental tier)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from genalign.algorithms._groups import group_stats, make_groups
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.experimental.credit.running_means import RunningMean, global_mean

#: indicator order of the explore / exploit weight vectors
INDICATORS = ("acceleration", "velocity", "rank")
#: relative deviations are clamped to ``±MAX_DEVIATION`` (as the published code)
MAX_DEVIATION = 5.0


def effective_rank(matrix: Tensor) -> Tensor:
    """``[B]`` effective rank ``exp(−Σ_k p_k log p_k)``, ``p = σ / Σσ``, of the centred rows of ``matrix`` ``[B, k, H]``
    (``σ`` its singular values); 1 for a matrix whose centred rows are all zero (one row, or identical rows)."""
    centred = matrix - matrix.mean(dim=1, keepdim=True)  # [B, k, H]
    singular = torch.linalg.svdvals(centred.double())  # [B, min(k, H)]
    total = singular.sum(-1, keepdim=True)  # [B, 1]
    p = torch.where(total > 0, singular / total.clamp_min(1e-300), 0.0)  # [B, min(k, H)]
    return torch.exp(-torch.special.xlogy(p, p).sum(-1))  # [B]


def prefix_ranks(hidden: Tensor, length: int, stride: int) -> list[float]:
    """The effective ranks of the prefixes ``[:k]`` of one response's hidden states ``hidden`` ``[L, H]`` at
    ``k = stride, 2·stride, ...`` and at ``k = length`` (the whole response) when it is not a multiple."""
    points = list(range(stride, length + 1, stride))
    if not points or points[-1] != length:
        points.append(length)
    return [float(effective_rank(hidden[None, :k])[0]) for k in points]


def rank_dynamics(ranks: Sequence[float]) -> tuple[float, float, float]:
    """``(ERA, ERV, ER)`` of a response from its prefix effective ranks ``ER_1 .. ER_m``: ``ER = ER_m``; the velocity
    ``ERV = mean_{j ≥ 2} d_j`` with ``d_j = ER_j − mean(ER_1 .. ER_{j−1})``; the acceleration ``ERA = mean_{j ≥ 3}
    (d_j − d_{j−1})`` (0 when there are too few points)."""
    velocities = [ranks[j] - sum(ranks[:j]) / j for j in range(1, len(ranks))]
    accelerations = [velocities[j] - velocities[j - 1] for j in range(1, len(velocities))]
    velocity = sum(velocities) / len(velocities) if velocities else 0.0
    acceleration = sum(accelerations) / len(accelerations) if accelerations else 0.0
    return acceleration, velocity, ranks[-1]


def rank_indicators(hidden: Tensor, mask: Tensor, stride: int) -> Tensor:
    """``[N, 3]`` (ERA, ERV, ER) of each response from its hidden states ``hidden`` ``[N, T, H]`` at its valid actions
    (``mask`` ``[N, T]``; holes, such as environment tokens, are skipped); zeros for a response without actions."""
    rows = []
    for i in range(hidden.shape[0]):
        states = hidden[i][mask[i] > 0].float()  # [L, H]
        rows.append(rank_dynamics(prefix_ranks(states, states.shape[0], stride)) if states.shape[0] else (0.0,) * 3)
    return torch.tensor(rows, dtype=torch.float64)


def _check(stride: int, gain: float, kappa: float, scale: float, weights: Sequence[Sequence[float]]) -> None:
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
        raise ValueError(f"stride={stride!r} must be an integer >= 1 (actions between two prefix ranks)")
    if not (gain >= 0 and kappa >= 1 and scale >= 0):
        raise ValueError(
            f"need gain >= 0, kappa >= 1 (the bonus never flips an advantage's sign) and scale >= 0, got "
            f"gain={gain!r}, kappa={kappa!r}, scale={scale!r}"
        )
    for vector in weights:
        if len(vector) != len(INDICATORS):
            raise ValueError(f"explore_weights and exploit_weights weigh {INDICATORS}: 3 numbers each, got {vector!r}")


class EffectiveRankBonus:
    """:func:`effective_rank_bonus` bound once; with ``baseline: moving_average`` it keeps the published baseline, an
    exponential moving average (``momentum``) of earlier steps' batch means of (ERA, ERV, ER), across steps and
    checkpoints (:class:`~genalign.experimental.credit.running_means.RunningMean`). The batch mean is taken over
    every process (:func:`~genalign.experimental.credit.running_means.global_mean`), so all processes keep the same
    baseline."""

    def __init__(self, **hp: Any) -> None:
        self.hp = hp
        self.options = {**CREDIT_RULES.hyperparameters("effective_rank_bonus"), **hp}  # every value, defaults included
        _check_all(**self.options)
        self.history = RunningMean(size=len(INDICATORS), momentum=self.options["momentum"])

    def __call__(self, advantages: Tensor, batch: StepBatch) -> Tensor:
        o = self.options
        if o["baseline"] == "group" or o["moving_mean"] is not None:
            return effective_rank_bonus(advantages, batch, **self.hp)
        mask = batch.mask.to(advantages.device)
        indicators = rank_indicators(batch.require("hidden", "credit rule 'effective_rank_bonus'"), mask, o["stride"])
        batch_mean = global_mean(indicators[(mask.sum(1) > 0).cpu()])  # [3] over every process's valid responses
        earlier = self.history.value()
        baselines = (batch_mean if earlier is None else earlier).expand_as(indicators)  # [N, 3]
        weights = (o["explore_weights"], o["exploit_weights"])
        result = _bonus(advantages, mask, indicators, baselines, o["gain"], o["kappa"], o["scale"], weights,
                        o["placement"])  # fmt: skip
        self.history.update(batch_mean)  # AFTER this step's bonus
        return result

    def state_dict(self) -> dict[str, Any]:
        return self.history.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history.load_state_dict(state)


def _check_all(
    *, stride: int, gain: float, kappa: float, scale: float, explore_weights: Sequence[float],
    exploit_weights: Sequence[float], placement: str, baseline: str, momentum: float,
    moving_mean: Sequence[float] | None,
) -> None:  # fmt: skip
    _check(stride, gain, kappa, scale, (explore_weights, exploit_weights))
    if placement not in ("every_action", "last_action"):
        raise ValueError(f"placement={placement!r} must be 'every_action' or 'last_action'")
    if baseline not in ("group", "moving_average"):
        raise ValueError(f"baseline={baseline!r} must be 'group' (the group's mean) or 'moving_average' (published)")
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum={momentum!r} must be in [0, 1) (the weight of the earlier average, e.g. 0.9)")
    if moving_mean is not None and len(moving_mean) != len(INDICATORS):
        raise ValueError(f"moving_mean={moving_mean!r} must hold 3 numbers (ERA, ERV, ER) or be null")


@CREDIT_RULES.register(
    "effective_rank_bonus",
    bind=EffectiveRankBonus,
    needs=("hidden",),
    formula="ER = exp(H(σ/Σσ)) of the centred hidden states; ERV, ERA = 1st/2nd differences of prefix ERs; "
    "δ_k = clamp((x_k − b_k)/(|b_k| + 1e-8), ±5), b = mean_G x (group) or an EMA of earlier batch means; "
    " τ = σ(g·δ_ERA); w = τ·w_explore + (1−τ)·w_exploit; "
    "aux = c·Σ_k w_k tanh δ_k; A_it ← A_it + min(relu(aux_i), |A_it|/κ)",
    source="[2] VERL (Velocity-Exploiting Rank-Learning; defaults from the published training script)",
    summary="An advantage bonus from the hidden states' effective rank (exploration) and its velocity "
    "(exploitation), blended by the rank's acceleration, and bounded by a fraction of the advantage.",
)
def effective_rank_bonus(
    advantages: Tensor,
    batch: StepBatch,
    *,
    stride: int = 40,
    gain: float = 2.0,
    kappa: float = 2.0,
    scale: float = 1.0,
    explore_weights: Sequence[float] = (0.0, 0.0, 1.0),
    exploit_weights: Sequence[float] = (0.0, 1.0, 0.0),
    placement: Literal["every_action", "last_action"] = "every_action",
    baseline: Literal["group", "moving_average"] = "group",
    momentum: float = 0.9,
    moving_mean: Sequence[float] | None = None,
) -> Tensor:
    """Velocity-Exploiting Rank-Learning [2]: exploration is measured at the hidden-state level by the effective rank
    (ER) of a response's hidden states, exploitation by its first derivative along the response (ERV, how fast new
    directions still open up), and the second derivative (ERA) acts as a meta-controller: a response whose ERA is above
    the baseline leans on the exploration channel (its ER), one below on the exploitation channel (its ERV). The
    resulting auxiliary reward becomes a non-negative advantage bonus capped at ``|A|/κ``, so it reinforces but never
    outweighs the outcome.

    ER of a prefix is ``exp`` of the entropy of its normalised singular values (:func:`effective_rank`); prefixes are
    taken every ``stride`` actions and at the end (:func:`prefix_ranks`, :func:`rank_dynamics`). Each indicator's
    relative deviation from its baseline is clamped to ``±5``; ``τ = σ(gain·δ_ERA)`` blends ``explore_weights`` and
    ``exploit_weights`` (over ERA, ERV, ER); ``aux = scale·Σ_k w_k·tanh(δ_k)``. Defaults are the published script's
    (stride 40, gain 2, κ = 2, fixed scale 1, explore on ER, exploit on ERV).

    Baselines: ``baseline: moving_average`` is the published code's: each indicator's baseline is an exponential
    moving average (weight ``momentum`` on the earlier average) of earlier steps' batch means, kept by the bound
    option (:class:`EffectiveRankBonus`, checkpointed with the run; the first step uses its own batch mean, and the
    batch mean is taken over every process). Reading chosen: ``baseline: group`` (the default, stateless) takes the
    mean of the sample's group instead. The code adds the bonus at the response's last token only; ``placement: last_action`` does
    that, the default adds it to every action (the response-level bonus the paper describes). ``hidden`` is the last
    hidden state predicting each action.

    Args:
        advantages: ``[N, T]`` incoming advantages.
        batch: reads ``hidden`` ``[N, T, H]``, ``mask`` and ``group_ids``.
        stride: actions between two prefix ranks (>= 1).
        gain: the meta-controller's slope ``g >= 0``.
        kappa: ``κ >= 1``: the bonus is at most ``|A|/κ``.
        scale: ``c >= 0``, the auxiliary reward's weight.
        explore_weights, exploit_weights: weights over (ERA, ERV, ER).
        placement: ``every_action`` or ``last_action``.
        baseline: ``group`` (the group's mean) or ``moving_average`` (``moving_mean``).
        momentum: weight of the earlier average in the moving average (read by :class:`EffectiveRankBonus`).
        moving_mean: ``[3]`` the moving baseline of (ERA, ERV, ER) (supplied by the bound option); None: this batch's
            mean of the valid responses.
    Returns:
        ``[N, T]`` advantages with the bonus (unchanged on padding).
    """
    _check_all(stride=stride, gain=gain, kappa=kappa, scale=scale, explore_weights=explore_weights,
               exploit_weights=exploit_weights, placement=placement, baseline=baseline, momentum=momentum,
               moving_mean=moving_mean)  # fmt: skip
    mask = batch.mask.to(advantages.device)
    indicators = rank_indicators(batch.require("hidden", "credit rule 'effective_rank_bonus'"), mask, stride)  # [N, 3]
    if baseline == "group":
        groups = make_groups(batch.group_ids.cpu(), indicators.shape[0], min_size=1)
        baselines = group_stats(indicators, groups, unbiased=False).mean[groups.index]  # [N, 3]
    else:
        present = (mask.sum(1) > 0).cpu()
        moving = indicators[present].mean(0) if moving_mean is None else torch.tensor(list(moving_mean))
        baselines = moving.double().expand_as(indicators)  # [N, 3]
    return _bonus(advantages, mask, indicators, baselines, gain, kappa, scale, (explore_weights, exploit_weights),
                  placement)  # fmt: skip


def _bonus(
    advantages: Tensor, mask: Tensor, indicators: Tensor, baselines: Tensor, gain: float, kappa: float, scale: float,
    weights: tuple[Sequence[float], Sequence[float]], placement: str,
) -> Tensor:  # fmt: skip
    """``[N, T]`` advantages plus the capped bonus of indicators ``[N, 3]`` measured against ``baselines`` ``[N, 3]``."""
    deviation = ((indicators - baselines) / (baselines.abs() + 1e-8)).clamp(-MAX_DEVIATION, MAX_DEVIATION)  # [N, 3]
    tendency = torch.sigmoid(gain * deviation[:, 0:1])  # [N, 1] τ, from ERA
    explore = torch.tensor(list(weights[0]), dtype=torch.float64)
    exploit = torch.tensor(list(weights[1]), dtype=torch.float64)
    blend = tendency * explore + (1.0 - tendency) * exploit  # [N, 3]
    aux = scale * (blend * torch.tanh(deviation)).sum(1)  # [N]
    bonus = torch.minimum(aux.clamp_min(0.0).to(advantages)[:, None], advantages.abs() / kappa)  # [N, T]
    valid = mask > 0
    if placement == "last_action":
        valid = valid & (torch.cumsum(mask, 1) == mask.sum(1, keepdim=True))  # [N, T] the last valid action only
    return torch.where(valid, advantages + bonus, advantages)  # [N, T]
