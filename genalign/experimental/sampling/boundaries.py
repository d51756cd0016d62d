"""Prompt selection at the model's learning boundary: AdaGRPO's online curriculum filter [62] and VAS's
variance-promotion sampling [110].

Both key their per-prompt statistics by the data-row index (the same prompt in every epoch), read a prompt's
success as its reward clamped to ``[0, 1]`` (after an optional affine rescaling for rewards on another scale, such as
image reward models), and draw ``wanted`` prompts from a pool of ``pool × wanted`` candidates before the rollout, so
they work for every policy family (the token diversity of VAS excepted, which reads action ids).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from genalign.experimental.sampling.curricula import check_fraction
from genalign.sampling.base import SAMPLE_SOURCES, Candidate, Decision, Outcome, RuleDefaults, per_prompt


def rescaled(outcome: Outcome, reward_range: tuple[float, float]) -> Outcome:
    """``outcome`` with rewards mapped affinely from ``reward_range = (low, high)`` to ``[0, 1]`` (not clamped here:
    :func:`per_prompt` clamps)."""
    low, high = reward_range
    if (low, high) == (0.0, 1.0):
        return outcome
    return dataclasses.replace(outcome, rewards=(outcome.rewards - low) / (high - low))


def check_range(reward_range: Any) -> tuple[float, float]:
    if not (isinstance(reward_range, (list, tuple)) and len(reward_range) == 2 and reward_range[0] < reward_range[1]):
        raise ValueError(
            f"reward_range = {reward_range!r} must be [low, high] with low < high (the reward that counts as no "
            "success and the one that counts as full success)"
        )
    return float(reward_range[0]), float(reward_range[1])


def check_pool(pool: float) -> None:
    if not pool >= 1.0:
        raise ValueError(f"pool = {pool!r} must be >= 1 (candidates per prompt of the step)")


def weighted_pick(pool: list[Candidate], weights: list[float], count: int, generator: torch.Generator) -> list[int]:
    """``count`` positions in ``pool`` drawn without replacement with probability ``∝ weights`` (all when
    ``count >= len(pool)``, in pool order)."""
    if count >= len(pool):
        return list(range(len(pool)))
    if count <= 0:
        return []
    picks = torch.multinomial(torch.tensor(weights, dtype=torch.float64), count, replacement=False, generator=generator)
    return picks.tolist()


@SAMPLE_SOURCES.register(
    "adagrpo_curriculum",
    formula="p̂_x ← m·p̂_x + (1−m)·mean_i clip(r̃_i, 0, 1) per visit (r̃ = reward rescaled from reward_range); "
    "w_x = exp(−(p̂_x − b)²/(2τ²)) + ε (unseen: p̂ = b); wanted prompts drawn without replacement ∝ w_x from "
    "pool × wanted candidates",
    source="[62] AdaGRPO (online curriculum filtering)",
    summary="Tracks each prompt's proficiency across visits and draws the prompts whose proficiency lies at the "
    "model's learning boundary (neither mastered nor out of reach) most often; family-neutral (flow models too).",
)
class AdaGRPOCurriculum(RuleDefaults):
    """[62] AdaGRPO's online curriculum filtering: select prompts that match the model's current learning boundary.

    Reading chosen: the abstract says the strategy "dynamically tracks the model's proficiency and adaptively selects
    prompts that best match its current learning boundary", without the tracker or the boundary. genalign tracks the
    proficiency ``p̂_x`` of each prompt as an exponential moving average of its group's mean success (the first visit
    sets it; rewards are rescaled from ``reward_range`` to ``[0, 1]`` and clamped, so image rewards on another scale
    work) and defines the boundary as proficiency ``b`` (default 0.5: the group's outcome is most uncertain, so its
    advantages carry the most signal). Before the rollout, ``pool × wanted`` candidates are drawn from the stream and
    ``wanted`` of them are sampled without replacement with probability ``∝ exp(−(p̂_x − b)²/(2τ²)) + ε``; a prompt
    never seen counts as on the boundary (it is explored first). Sampling rather than a hard band keeps every prompt
    reachable, so its estimate follows the policy. The global proficiency (the batch's mean success) is logged.
    All defaults are genalign's choices.

    Args:
        boundary: ``b`` in ``[0, 1]``, the proficiency of the learning boundary.
        width: ``τ > 0``, how sharply selection concentrates on the boundary.
        momentum: ``m`` in ``[0, 1)``, the weight of the previous estimate.
        epsilon: ``ε > 0``, the priority floor.
        pool: candidates drawn per prompt of the step (>= 1).
        reward_range: ``[low, high]`` rewards mapped to success 0 and 1.
    """

    def __init__(
        self, *, boundary: float = 0.5, width: float = 0.2, momentum: float = 0.5, epsilon: float = 0.01,
        pool: float = 2.0, reward_range: tuple[float, float] = (0.0, 1.0),
    ) -> None:  # fmt: skip
        check_fraction("boundary", boundary)
        check_fraction("momentum", momentum, high_open=True)
        if not width > 0:
            raise ValueError(f"width = {width!r} must be > 0 (the spread of proficiencies around the boundary)")
        if not epsilon > 0:
            raise ValueError(f"epsilon = {epsilon!r} must be > 0 (every candidate keeps a chance)")
        check_pool(pool)
        self.boundary, self.width, self.momentum, self.epsilon, self.pool = boundary, width, momentum, epsilon, pool
        self.reward_range = check_range(reward_range)
        self.proficiency: dict[int, float] = {}  # data-row index -> estimated success rate

    def priority(self, index: int) -> float:
        """``exp(−(p̂ − b)²/(2τ²)) + ε`` (``1 + ε`` for a prompt never seen)."""
        p = self.proficiency.get(index, self.boundary)
        return math.exp(-((p - self.boundary) ** 2) / (2.0 * self.width**2)) + self.epsilon

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        picks = weighted_pick(pool, [self.priority(c.index) for c in pool], wanted, generator)
        return [pool[i] for i in picks]

    def after_rewards(self, outcome: Outcome) -> Decision:
        prompts = per_prompt(rescaled(outcome, self.reward_range))
        for index, mean, valid in zip(prompts.indices, prompts.mean, prompts.valid):
            if valid == 0:
                continue
            old = self.proficiency.get(index)
            self.proficiency[index] = mean if old is None else self.momentum * old + (1.0 - self.momentum) * mean
        valid = sum(prompts.valid)
        stats = {
            "tracked": float(len(self.proficiency)),
            "global_proficiency": sum(prompts.successes) / valid if valid else math.nan,
            "boundary_distance": _mean([abs(self.proficiency[i] - self.boundary) for i in prompts.indices
                                        if i in self.proficiency]),
        }  # fmt: skip
        return Decision(stats=stats)

    def state_dict(self) -> dict[str, Any]:
        return {"proficiency": dict(self.proficiency)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.proficiency = {int(k): float(v) for k, v in state["proficiency"].items()}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def distinct_ngram_ratio(completions: list[torch.Tensor], n: int) -> float:
    """Trajectory diversity of a group: distinct ``n``-grams over all ``n``-grams of its completions (each ``[T_i]``
    long action ids; a completion shorter than ``n`` counts as one ``n``-gram of itself). 1 = no ``n``-gram repeats
    within or across completions; ``1/G`` for ``G`` identical completions without inner repeats."""
    grams = []
    for tokens in completions:
        ids = tokens.tolist()
        grams += [tuple(ids[t : t + n]) for t in range(len(ids) - n + 1)] if len(ids) >= n else [tuple(ids)]
    return len(set(grams)) / len(grams) if grams else 0.0


@SAMPLE_SOURCES.register(
    "vas",
    formula="p̂_x, d̂_x ← EMAs of the group's mean success and distinct-n ratio; VPS_x = α·4p̂_x(1−p̂_x) + β·d̂_x "
    "(unseen: α + β); of wanted prompts, ⌈λ·wanted⌉ drawn without replacement ∝ VPS_x + ε from pool × wanted "
    "candidates, the rest uniformly from the remaining candidates",
    source="[110] VAS (Variance-Aware Sampling, MMR1)",
    summary="Variance Promotion Score per prompt (outcome variance of its earlier groups plus the diversity of their "
    "trajectories) drives prompt sampling, so batches hold prompts likely to give non-zero reward variance.",
)
class VarianceAwareSampling(RuleDefaults):
    """[110] VAS: draw prompts by their Variance Promotion Score, outcome variance plus trajectory diversity.

    The abstract's bound (reward variance lower-bounds the expected policy-gradient magnitude) motivates drawing
    prompts whose groups are likely to have reward variance. Per prompt, genalign tracks the mean success ``p̂_x``
    (rewards rescaled from ``reward_range`` and clamped to ``[0, 1]``) and the trajectory diversity ``d̂_x`` of its
    group, both as exponential moving averages over visits (the first visit sets them). The outcome-variance score
    is the Bernoulli variance scaled to ``[0, 1]``, ``4p̂(1 − p̂)``; ``VPS = α·4p̂(1 − p̂) + β·d̂``.

    Reading chosen: trajectory diversity is the distinct-``n``-gram ratio of the group's completions (distinct
    ``n``-grams over all ``n``-grams, pooled over the group's samples; action ids, so it needs a token family);
    with ``diversity_weight = 0`` the rule reads no tokens and works for every family. Prompts are drawn as a
    mixture: ``⌈λ·wanted⌉`` by VPS-weighted sampling without replacement, the rest uniformly among the remaining
    candidates (keeping coverage of the whole data set); a prompt never seen gets the largest score ``α + β``.
    Scores are updated after every visit (not in periodic sweeps over the data set). All defaults are genalign's
    choices.

    Args:
        variance_weight: ``α >= 0``; diversity_weight: ``β >= 0`` (0 = outcome variance only, no tokens read).
        ngram: ``n`` of the distinct-n diversity.
        mixture: ``λ`` in ``[0, 1]``, the fraction of prompts drawn by VPS (the rest uniformly).
        momentum: weight of the previous estimates in ``[0, 1)``.
        epsilon: ``ε > 0``, the score floor.
        pool: candidates drawn per prompt of the step (>= 1).
        reward_range: ``[low, high]`` rewards mapped to success 0 and 1.
    """

    def __init__(
        self, *, variance_weight: float = 1.0, diversity_weight: float = 1.0, ngram: int = 2, mixture: float = 0.5,
        momentum: float = 0.5, epsilon: float = 0.01, pool: float = 2.0, reward_range: tuple[float, float] = (0.0, 1.0),
    ) -> None:  # fmt: skip
        if not (variance_weight >= 0 and diversity_weight >= 0 and variance_weight + diversity_weight > 0):
            raise ValueError(
                f"variance_weight = {variance_weight!r} and diversity_weight = {diversity_weight!r} must be >= 0 and "
                "not both 0"
            )
        if not (isinstance(ngram, int) and ngram >= 1):
            raise ValueError(f"ngram = {ngram!r} must be an integer >= 1")
        check_fraction("mixture", mixture)
        check_fraction("momentum", momentum, high_open=True)
        if not epsilon > 0:
            raise ValueError(f"epsilon = {epsilon!r} must be > 0 (every candidate keeps a chance)")
        check_pool(pool)
        self.alpha, self.beta, self.ngram, self.mixture = variance_weight, diversity_weight, ngram, mixture
        self.momentum, self.epsilon, self.pool = momentum, epsilon, pool
        self.reward_range = check_range(reward_range)
        self.needs_tokens = diversity_weight > 0
        self.success: dict[int, float] = {}  # data-row index -> mean success
        self.diversity: dict[int, float] = {}  # data-row index -> distinct-n ratio of its group

    def score(self, index: int) -> float:
        """``VPS_x = α·4p̂(1 − p̂) + β·d̂`` (``α + β`` for a prompt never seen)."""
        p = self.success.get(index, 0.5)
        diversity = self.diversity.get(index, 1.0) if self.needs_tokens else 0.0
        return self.alpha * 4.0 * p * (1.0 - p) + self.beta * diversity

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        if len(pool) <= wanted:
            return pool
        by_score = math.ceil(self.mixture * wanted)
        first = weighted_pick(pool, [self.score(c.index) + self.epsilon for c in pool], by_score, generator)
        taken = set(first)
        rest = [i for i in range(len(pool)) if i not in taken]
        uniform = torch.randperm(len(rest), generator=generator)[: wanted - by_score].tolist()
        return [pool[i] for i in first] + [pool[rest[j]] for j in uniform]

    def after_rewards(self, outcome: Outcome) -> Decision:
        prompts = per_prompt(rescaled(outcome, self.reward_range))
        m = self.momentum
        for position, index, mean, valid in zip(prompts.positions, prompts.indices, prompts.mean, prompts.valid):
            if valid == 0:
                continue
            self.success[index] = mean if index not in self.success else m * self.success[index] + (1 - m) * mean
            if self.needs_tokens and outcome.tokens is not None:
                members = (outcome.positions == position).nonzero().flatten().tolist()
                ratio = distinct_ngram_ratio(
                    [outcome.tokens[i, : int(outcome.lengths[i])] for i in members], self.ngram
                )
                old = self.diversity.get(index)
                self.diversity[index] = ratio if old is None else m * old + (1 - m) * ratio
        scores = [self.score(i) for i in prompts.indices]
        return Decision(stats={"tracked": float(len(self.success)), "vps_mean": _mean(scores)})

    def state_dict(self) -> dict[str, Any]:
        return {"success": dict(self.success), "diversity": dict(self.diversity)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.success = {int(k): float(v) for k, v in state["success"].items()}
        self.diversity = {int(k): float(v) for k, v in state["diversity"].items()}
