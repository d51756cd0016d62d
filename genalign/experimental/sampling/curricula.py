"""Prompt selection from per-prompt statistics kept across steps: DEPO's difficulty filter and SPO's value tracker.

Both key their statistics by the prompt's data-row index (the same prompt in every epoch) and read a prompt's
success as its mean reward clamped to ``[0, 1]`` (the pass rate for 0/1 rewards; scale other rewards into
``[0, 1]``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from genalign.experimental.shaping.tracked import PROMPT_VALUE
from genalign.sampling.base import SAMPLE_SOURCES, Candidate, Decision, Outcome, RuleDefaults, per_prompt


def check_fraction(name: str, value: float, *, low_open: bool = False, high_open: bool = False) -> None:
    ok = (value > 0.0 if low_open else value >= 0.0) and (value < 1.0 if high_open else value <= 1.0)
    if not ok:
        interval = ("(" if low_open else "[") + "0, 1" + (")" if high_open else "]")
        raise ValueError(f"{name} = {value!r} must be in {interval}")


@SAMPLE_SOURCES.register(
    "depo",
    formula="p̂_x ← m·p̂_x + (1−m)·mean_i clip(r_i, 0, 1) after each visit of prompt x; before the rollout x is "
    "skipped when p̂_x ≥ easy or p̂_x ≤ hard, unless it was skipped max_skips times in a row",
    source="[151] DEPO",
    summary="Online difficulty estimate per prompt from its earlier visits; prompts estimated too easy or too hard "
    "are filtered before the rollout (no samples spent on them), drawing more prompts from the stream instead.",
)
class DEPO(RuleDefaults):
    """[151] DEPO: an online difficulty estimator filters prompts before the rollout.

    Reading chosen: the abstract names an "online Difficulty Estimator" that "assesses and filters training data
    before the rollout phase" without its form. genalign estimates each prompt's success rate from its own earlier
    visits (an exponential moving average ``p̂_x ← m·p̂_x + (1 − m)·mean_i clip(r_i, 0, 1)``, the first visit setting
    ``p̂_x``) and skips a prompt whose estimate says its group would carry no signal (``p̂_x ≥ easy``: all solved;
    ``p̂_x ≤ hard``: none solved). A prompt never seen is always admitted; a prompt skipped ``max_skips`` times in a
    row is admitted again, so that its estimate follows the policy. The step draws up to ``max_draw × prompts`` from
    the stream to fill the batch (passed-over prompts fill any shortfall). Defaults are genalign's choices.

    Args:
        easy: skip prompts with ``p̂ ≥ easy``; hard: skip prompts with ``p̂ ≤ hard`` (``hard < easy``).
        momentum: weight ``m`` of the previous estimate (0 = the last visit only).
        max_skips: consecutive skips after which a prompt is admitted again (0 = never skip).
        max_draw: the most candidates drawn from the stream per step, per prompt of the step.
    """

    def __init__(
        self, *, easy: float = 1.0, hard: float = 0.0, momentum: float = 0.0, max_skips: int = 2,
        max_draw: float = 4.0,
    ) -> None:  # fmt: skip
        check_fraction("easy", easy, low_open=True)
        check_fraction("hard", hard, high_open=True)
        check_fraction("momentum", momentum, high_open=True)
        if not hard < easy:
            raise ValueError(f"hard = {hard!r} must be below easy = {easy!r}")
        if not (isinstance(max_skips, int) and max_skips >= 0):
            raise ValueError(f"max_skips = {max_skips!r} must be an integer >= 0")
        if not max_draw >= 1.0:
            raise ValueError(f"max_draw = {max_draw!r} must be >= 1 (candidates per prompt of the step)")
        self.easy, self.hard, self.momentum, self.max_skips, self.max_draw = easy, hard, momentum, max_skips, max_draw
        self.estimates: dict[int, float] = {}  # data-row index -> estimated success rate
        self.skips: dict[int, int] = {}  # data-row index -> consecutive skips
        self._skipped = 0  # this step's skips (reset after the rewards, so never part of a checkpoint)

    def admits(self, index: int) -> bool:
        estimate = self.estimates.get(index)
        if estimate is None or self.skips.get(index, 0) >= self.max_skips:
            return True
        return self.hard < estimate < self.easy

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        admitted = []
        for candidate in pool:
            if self.admits(candidate.index):
                admitted.append(candidate)
            else:
                self.skips[candidate.index] = self.skips.get(candidate.index, 0) + 1
                self._skipped += 1
        return admitted

    def after_rewards(self, outcome: Outcome) -> Decision:
        prompts = per_prompt(outcome)
        for index, mean, valid in zip(prompts.indices, prompts.mean, prompts.valid):
            if valid == 0:
                continue
            old = self.estimates.get(index)
            self.estimates[index] = mean if old is None else self.momentum * old + (1.0 - self.momentum) * mean
            self.skips[index] = 0
        stats = {"skipped": float(self._skipped), "tracked": float(len(self.estimates))}
        seen = [self.estimates[i] for i in prompts.indices if i in self.estimates]
        stats["estimate_mean"] = sum(seen) / len(seen) if seen else float("nan")
        self._skipped = 0
        return Decision(stats=stats)

    def state_dict(self) -> dict[str, Any]:
        return {"estimates": dict(self.estimates), "skips": dict(self.skips)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.estimates = {int(k): float(v) for k, v in state["estimates"].items()}
        self.skips = {int(k): int(v) for k, v in state["skips"].items()}


@SAMPLE_SOURCES.register(
    "spo",
    formula="first visit: α_x = v̂₀/(1−ρ), β_x = (1−v̂₀)/(1−ρ) with v̂₀ the group's mean; later: α_x ← ρα_x + Σ_i r_i, "
    "β_x ← ρβ_x + Σ_i (1 − r_i), r_i = clip(r_i, 0, 1); v̂_x = α_x/(α_x+β_x); prompts drawn from a pool of "
    "pool × wanted candidates without replacement with P(x) ∝ sqrt(v̂_x(1−v̂_x)) + ε (unseen: v̂ = 0.5)",
    source="[324] SPO (value tracker and prioritized sampling)",
    summary="A persistent Beta value tracker per prompt (discounted success counts) drives prioritized sampling: "
    "prompts whose success probability is most uncertain (near 0.5) are drawn most often.",
    provides=(PROMPT_VALUE,),
)
class SPOTracker(RuleDefaults):
    """[324] SPO's persistent per-prompt value tracker with prioritized sampling.

    The tracker is a discounted Beta posterior of the prompt's success probability: on the first visit
    ``α = N_eff·v̂₀``, ``β = N_eff·(1 − v̂₀)`` with ``N_eff = 1/(1 − ρ)`` and ``v̂₀`` the group's mean success; on each
    later visit ``α ← ρα + Σ_i r_i``, ``β ← ρβ + Σ_i (1 − r_i)`` over the visit's samples; ``v̂ = α/(α + β)``. Before
    the rollout, ``pool × wanted`` candidates are drawn from the stream and ``wanted`` of them are sampled without
    replacement with probability ``∝ sqrt(v̂(1 − v̂)) + ε`` (a prompt never seen has ``v̂ = 0.5``, the top priority).

    Reading chosen where the abstract is silent: SPO adapts the discount ρ to the KL between the current policy and
    the one of the prompt's last visit; genalign uses a fixed ρ (that KL needs log-probs the trainer does not keep),
    initialises the tracker from the first visit's group (SPO estimates it offline). Each sample's ``prompt_value``
    signal is its prompt's ``v̂`` *before* this visit (0.5 for a prompt never seen), so the reward shaper
    ``tracked_baseline`` can give SPO's group-free advantage (``r − v̂``, normalised over the batch) with one sample per
    prompt (``algorithm.group_size: 1``). ``discount``, ``epsilon`` and ``pool`` defaults are genalign's choices.

    Args:
        discount: ρ in ``(0, 1)``, the weight of earlier visits.
        epsilon: ε > 0, the priority floor (every candidate keeps a chance).
        pool: candidates drawn per prompt of the step to sample from (>= 1).
    """

    def __init__(self, *, discount: float = 0.9, epsilon: float = 0.05, pool: float = 2.0) -> None:
        check_fraction("discount", discount, low_open=True, high_open=True)
        if not epsilon > 0:
            raise ValueError(f"epsilon = {epsilon!r} must be > 0 (every candidate keeps a chance)")
        if not pool >= 1.0:
            raise ValueError(f"pool = {pool!r} must be >= 1 (candidates per prompt of the step)")
        self.discount, self.epsilon, self.pool = discount, epsilon, pool
        self.alpha: dict[int, float] = {}  # data-row index -> discounted successes
        self.beta: dict[int, float] = {}  # data-row index -> discounted failures

    def value(self, index: int) -> float:
        """``v̂_x``, 0.5 for a prompt never seen."""
        if index not in self.alpha:
            return 0.5
        return self.alpha[index] / (self.alpha[index] + self.beta[index])

    def priority(self, index: int) -> float:
        v = self.value(index)
        return math.sqrt(v * (1.0 - v)) + self.epsilon

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        if len(pool) <= wanted:
            return pool
        weights = torch.tensor([self.priority(c.index) for c in pool], dtype=torch.float64)  # [pool]
        picks = torch.multinomial(weights, wanted, replacement=False, generator=generator)  # [wanted]
        return [pool[i] for i in picks.tolist()]

    def after_rewards(self, outcome: Outcome) -> Decision:
        prior = torch.tensor([self.value(int(i)) for i in outcome.indices.tolist()], dtype=torch.float64)  # [N]
        prompts = per_prompt(outcome)
        rho, n_eff = self.discount, 1.0 / (1.0 - self.discount)
        for index, mean, valid, successes in zip(prompts.indices, prompts.mean, prompts.valid, prompts.successes):
            if valid == 0:
                continue
            if index not in self.alpha:
                self.alpha[index], self.beta[index] = n_eff * mean, n_eff * (1.0 - mean)
            else:
                self.alpha[index] = rho * self.alpha[index] + successes
                self.beta[index] = rho * self.beta[index] + (valid - successes)
        values = [self.value(i) for i in prompts.indices]
        stats = {"tracked": float(len(self.alpha)), "value_mean": sum(values) / len(values) if values else math.nan}
        return Decision(stats=stats, signals={PROMPT_VALUE: prior})

    def state_dict(self) -> dict[str, Any]:
        return {"alpha": dict(self.alpha), "beta": dict(self.beta)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.alpha = {int(k): float(v) for k, v in state["alpha"].items()}
        self.beta = {int(k): float(v) for k, v in state["beta"].items()}
