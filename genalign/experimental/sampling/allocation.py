"""Adaptive rollout allocation in extra sampling rounds (:meth:`SampleRule.more_samples`): DARS's difficulty-adaptive
rollouts [192], AERO's Bayesian adaptive rollout with selective rejection [234] and XRPO's uncertainty-reduction
allocator with in-context seeding [241].

After the step's first rollout each rule sees every sample so far and asks for extra samples of some prompts; the
trainer samples them, computes their rewards and (while rounds remain) asks again. Success is the reward clamped to
``[0, 1]`` (after an optional rescaling from ``reward_range``), as in :mod:`genalign.experimental.sampling.curricula`.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Literal

import torch

from genalign.experimental.sampling.boundaries import check_range, rescaled
from genalign.experimental.sampling.curricula import check_fraction
from genalign.policies.base import GUIDANCE_KEY
from genalign.sampling.base import SAMPLE_SOURCES, Candidate, Decision, Outcome, RuleDefaults, per_prompt
from genalign.sampling.budgets import informative_subset


def _check_count(name: str, value: int, minimum: int = 1) -> None:
    if not (isinstance(value, int) and value >= minimum):
        raise ValueError(f"{name} = {value!r} must be an integer >= {minimum}")


@SAMPLE_SOURCES.register(
    "dars",
    formula="after round 0, prompt x with accuracy a_x < threshold (n samples) gets Δn_x = min(Δ_max, ⌈n'_x − n⌉) "
    "more: equal_treatment n' = n/(2√(a(1−a))) (its cumulative |advantage| 2n√(a(1−a)) raised to that of a = 0.5), "
    "hardness_weighted n' = n·√((1−a)/a) (raised to 2n(1−a)); a = 0: Δ_max",
    source="[192] DARS (Difficulty Adaptive Rollout Sampling)",
    summary="A second rollout stage for hard prompts: prompts with low accuracy in the first rollout get extra "
    "samples, so they yield more positive samples and a cumulative advantage GRPO would otherwise withhold.",
)
class DARS(RuleDefaults):
    """[192] DARS: difficulty-adaptive multi-stage rollouts that re-weight hard problems.

    With GRPO's std-normalised advantages a group of ``n`` samples with accuracy ``a`` has cumulative advantage
    ``Σ|A_i| = 2n√(a(1 − a))``, largest at ``a = 0.5`` and vanishing for hard prompts (the depth neglect the abstract
    describes). After the first rollout (round 0) DARS draws ``Δn`` extra samples for each prompt with ``a <
    threshold``: the ``equal_treatment`` schedule raises its cumulative advantage to ``n`` (that of ``a = 0.5``),
    the ``hardness_weighted`` schedule to ``2n(1 − a)`` (growing with hardness); the extra samples join the group and
    its advantages are computed over all of them. A prompt with no success yet (``a = 0``) gets ``Δ_max``, the cap.

    Reading chosen: the abstract names the re-weighting through "targeted multi-stage rollouts" but not the
    schedules; genalign implements the two named schedules with the closed forms above, ``equal_treatment`` by
    default, rounding up. ``threshold = 0.5`` and ``max_extra = 8`` are genalign's choices.

    Args:
        schedule: ``equal_treatment`` or ``hardness_weighted``.
        threshold: prompts with accuracy below it get extra samples, in ``(0, 1]``.
        max_extra: ``Δ_max``, the most extra samples per prompt (>= 1).
        reward_range: ``[low, high]`` rewards mapped to success 0 and 1.
    """

    rounds = 2

    def __init__(
        self, *, schedule: Literal["equal_treatment", "hardness_weighted"] = "equal_treatment",
        threshold: float = 0.5, max_extra: int = 8, reward_range: tuple[float, float] = (0.0, 1.0),
    ) -> None:  # fmt: skip
        if schedule not in ("equal_treatment", "hardness_weighted"):
            raise ValueError(f"schedule = {schedule!r} must be 'equal_treatment' or 'hardness_weighted'")
        check_fraction("threshold", threshold, low_open=True)
        _check_count("max_extra", max_extra)
        self.schedule, self.threshold, self.max_extra = schedule, threshold, max_extra
        self.reward_range = check_range(reward_range)
        self.group_size = 0  # samples per prompt of round 0, set by the stage

    def samples_per_prompt(self, group_size: int) -> None:
        self.group_size = group_size
        return None

    def extra(self, accuracy: float, n: int) -> int:
        """``Δn`` for a prompt with accuracy ``accuracy`` over ``n`` samples."""
        if accuracy >= self.threshold:
            return 0
        if accuracy <= 0.0:
            return self.max_extra
        if self.schedule == "equal_treatment":
            target = n / (2.0 * math.sqrt(accuracy * (1.0 - accuracy)))
        else:
            target = n * math.sqrt((1.0 - accuracy) / accuracy)
        return max(0, min(self.max_extra, math.ceil(target - n - 1e-9)))

    def more_samples(self, outcome: Outcome) -> dict[int, int]:
        prompts = per_prompt(rescaled(outcome, self.reward_range))
        wanted = {p: self.extra(mean, n) for p, mean, n in zip(prompts.positions, prompts.mean, prompts.valid) if n}
        return {p: k for p, k in wanted.items() if k > 0}

    def after_rewards(self, outcome: Outcome) -> Decision:
        prompts = per_prompt(rescaled(outcome, self.reward_range))
        counts = torch.bincount(torch.unique(outcome.positions, return_inverse=True)[1]) if len(outcome) else None
        extended = [c > self.group_size for c in counts.tolist()] if counts is not None else []
        by_position = dict(zip(torch.unique(outcome.positions).tolist(), extended))
        hard = [m for p, m in zip(prompts.positions, prompts.mean) if by_position.get(p)]
        rest = [m for p, m in zip(prompts.positions, prompts.mean) if not by_position.get(p)]
        stats = {
            "prompts_extended": float(len(hard)),
            "accuracy_extended": _mean(hard),
            "accuracy_others": _mean(rest),
        }
        return Decision(stats=stats)


def _mean(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else math.nan


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def dead_zone_probability(alpha: float, beta: float, n: int) -> float:
    """Beta-binomial probability that ``n`` samples of a prompt with success posterior ``Beta(α, β)`` all succeed
    or all fail: ``B(α+n, β)/B(α, β) + B(α, β+n)/B(α, β)``."""
    base = _log_beta(alpha, beta)
    return math.exp(_log_beta(alpha + n, beta) - base) + math.exp(_log_beta(alpha, beta + n) - base)


@SAMPLE_SOURCES.register(
    "aero",
    formula="posterior Beta(α_x, β_x), α ← ρα + Σs_i, β ← ρβ + Σ(1−s_i) (prior α₀ = β₀); skip x before the rollout "
    "when P_dead = B(α+G,β)/B(α,β) + B(α,β+G)/B(α,β) ≥ skip_above; a group whose rewards are all equal after a "
    "round gets k = min(k_max, ⌈log(1−q)/log(1−p_break)⌉) more, p_break = p̃ (all failed) or 1−p̃ (all succeeded) "
    "from the updated posterior mean p̃; groups larger than G keep the G samples of largest reward variance",
    source="[234] AERO (Adaptive Efficient Rollout Optimization)",
    summary="Bayesian posterior of each prompt's success rate: prompts predicted to give an all-equal group are "
    "skipped, degenerate groups get posterior-sized extra rollouts, and selective rejection prunes each group back "
    "to G informative rollouts.",
)
class AERO(RuleDefaults):
    """[234] AERO: adaptive rollout, selective rejection and a Bayesian posterior against zero-advantage dead zones.

    Reading chosen (the abstract names the three parts, not their form):

    * **Bayesian posterior**: per prompt a discounted ``Beta(α, β)`` posterior of its success probability (prior
      ``Beta(α₀, α₀)``; after a visit ``α ← ρα + Σ_i s_i``, ``β ← ρβ + Σ_i (1 − s_i)``, ``s_i`` the clamped success).
      Before the rollout a prompt is skipped when its posterior predictive probability that a group of ``G`` is all
      successes or all failures (the dead zone, zero advantages) is at least ``skip_above``; a prompt skipped
      ``max_skips`` times in a row is admitted again so that its posterior follows the policy.
    * **Adaptive rollout**: after a round, a group whose valid rewards are all equal gets ``k`` more samples, enough
      that with probability ``q`` at least one differs under the updated posterior mean ``p̃``: ``k =
      ⌈log(1 − q)/log(1 − p_break)⌉`` (``p_break = p̃`` when the group failed, ``1 − p̃`` when it succeeded), capped at
      ``max_extra``; it may ask again in a later round (up to ``max_rounds``).
    * **Selective rejection**: a group that grew beyond ``G`` keeps the ``G`` samples with the largest reward
      variance (:func:`~genalign.sampling.budgets.informative_subset`: a balanced set of successes and failures for
      0/1 rewards), so the extra rollouts never unbalance the update; a group still all-equal keeps its first ``G``.

    All defaults are genalign's choices.

    Args:
        discount: ``ρ`` in ``(0, 1]``, the weight of earlier visits.
        prior: ``α₀ > 0`` of the symmetric Beta prior.
        break_probability: ``q`` in ``(0, 1)``.
        max_extra: the most extra samples per prompt and round (>= 1).
        max_rounds: sampling rounds per step (>= 2).
        skip_above: dead-zone probability from which a prompt is skipped, in ``(0, 1]`` (1 = skip only certain ones).
        max_skips: consecutive skips after which a prompt is admitted again (0 = never skip).
        reward_range: ``[low, high]`` rewards mapped to success 0 and 1.
    """

    def __init__(
        self, *, discount: float = 0.9, prior: float = 1.0, break_probability: float = 0.9, max_extra: int = 8,
        max_rounds: int = 3, skip_above: float = 0.95, max_skips: int = 2, reward_range: tuple[float, float] = (0.0, 1.0),
        max_draw: float = 2.0,
    ) -> None:  # fmt: skip
        check_fraction("discount", discount, low_open=True)
        check_fraction("break_probability", break_probability, low_open=True, high_open=True)
        check_fraction("skip_above", skip_above, low_open=True)
        if not prior > 0:
            raise ValueError(f"prior = {prior!r} must be > 0 (the Beta prior's pseudo-counts)")
        _check_count("max_extra", max_extra)
        _check_count("max_rounds", max_rounds, 2)
        _check_count("max_skips", max_skips, 0)
        if not max_draw >= 1.0:
            raise ValueError(f"max_draw = {max_draw!r} must be >= 1 (candidates per prompt of the step)")
        self.discount, self.prior, self.break_probability = discount, prior, break_probability
        self.max_extra, self.rounds, self.skip_above, self.max_skips = max_extra, max_rounds, skip_above, max_skips
        self.reward_range, self.max_draw = check_range(reward_range), max_draw
        self.group_size = 2  # samples per prompt of round 0, set by the stage
        self.alpha: dict[int, float] = {}
        self.beta: dict[int, float] = {}
        self.skips: dict[int, int] = {}
        self._skipped = 0  # this step's skips (reset after the rewards)

    def samples_per_prompt(self, group_size: int) -> None:
        self.group_size = group_size
        return None

    def posterior(self, index: int, successes: float = 0.0, failures: float = 0.0) -> tuple[float, float]:
        """``(α, β)`` of prompt ``index`` after a visit with these (fractional) counts (none: the stored one)."""
        alpha, beta = self.alpha.get(index, self.prior), self.beta.get(index, self.prior)
        if successes + failures == 0:
            return alpha, beta
        return self.discount * alpha + successes, self.discount * beta + failures

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        admitted = []
        for candidate in pool:
            dead = dead_zone_probability(*self.posterior(candidate.index), self.group_size)
            if dead < self.skip_above or self.skips.get(candidate.index, 0) >= self.max_skips:
                admitted.append(candidate)
            else:
                self.skips[candidate.index] = self.skips.get(candidate.index, 0) + 1
                self._skipped += 1
        return admitted

    def extra(self, index: int, successes: float, failures: float) -> int:
        """Extra samples for an all-equal group with these counts."""
        alpha, beta = self.posterior(index, successes, failures)
        mean = alpha / (alpha + beta)
        p_break = mean if successes <= failures else 1.0 - mean
        if p_break <= 0.0:
            return self.max_extra
        if p_break >= 1.0:
            return 1
        k = math.ceil(math.log(1.0 - self.break_probability) / math.log(1.0 - p_break) - 1e-9)
        return max(1, min(self.max_extra, k))

    def more_samples(self, outcome: Outcome) -> dict[int, int]:
        scaled = rescaled(outcome, self.reward_range)
        prompts = per_prompt(scaled)
        wanted = {}
        for position, index, valid, successes in zip(prompts.positions, prompts.indices, prompts.valid,
                                                     prompts.successes):  # fmt: skip
            rewards = scaled.rewards[(scaled.positions == position) & ~scaled.rewards.isnan()]  # [n_valid]
            if valid and bool((rewards == rewards[0]).all()):
                wanted[position] = self.extra(index, successes, valid - successes)
        return wanted

    def after_rewards(self, outcome: Outcome) -> Decision:
        scaled = rescaled(outcome, self.reward_range)
        prompts = per_prompt(scaled)
        keep = torch.zeros(len(outcome), dtype=torch.bool)
        degenerate = 0
        for position, index, valid, successes in zip(prompts.positions, prompts.indices, prompts.valid,
                                                     prompts.successes):  # fmt: skip
            members = (outcome.positions == position).nonzero().flatten()  # [m] in sampling order
            rewards = scaled.rewards[members].double()  # [m]
            keep[members[informative_subset(rewards, self.group_size)]] = True
            given = rewards[~rewards.isnan()]  # [m_valid]
            degenerate += bool((given == given[0]).all()) if given.numel() else 1
            if valid:
                self.alpha[index], self.beta[index] = self.posterior(index, successes, valid - successes)
                self.skips[index] = 0
        stats = {"skipped": float(self._skipped), "tracked": float(len(self.alpha)),
                 "frac_degenerate": degenerate / len(prompts.positions) if prompts.positions else math.nan}  # fmt: skip
        self._skipped = 0
        return Decision(keep=keep, stats=stats)

    def state_dict(self) -> dict[str, Any]:
        return {"alpha": dict(self.alpha), "beta": dict(self.beta), "skips": dict(self.skips)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.alpha = {int(k): float(v) for k, v in state["alpha"].items()}
        self.beta = {int(k): float(v) for k, v in state["beta"].items()}
        self.skips = {int(k): int(v) for k, v in state["skips"].items()}


def student_t_quantile(probability: float, dof: int) -> float:
    """The ``probability`` quantile of Student's t with ``dof`` degrees of freedom: exact for 1 and 2, else the
    Cornish–Fisher expansion in ``1/ν`` (Abramowitz & Stegun 26.7.5; within 0.004 of the exact value for ν = 3 at
    0.975, closer for larger ν)."""
    assert dof >= 1 and 0.0 < probability < 1.0
    if dof == 1:
        return math.tan(math.pi * (probability - 0.5))
    if dof == 2:
        return (2.0 * probability - 1.0) / math.sqrt(2.0 * probability * (1.0 - probability))
    z, nu = NormalDist().inv_cdf(probability), float(dof)
    g1 = (z**3 + z) / 4.0
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96.0
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384.0
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160.0
    return z + g1 / nu + g2 / nu**2 + g3 / nu**3 + g4 / nu**4


def half_width(std: float, n: int, confidence: float) -> float:
    """``h(n) = t_{(1+c)/2, n−1}·s/√n``, the half-width of the ``c`` confidence interval of a mean from ``n`` samples
    with sample std ``s`` (0 when ``s = 0``; infinite for ``n < 2`` with ``s > 0``)."""
    if std == 0.0:
        return 0.0
    if n < 2:
        return math.inf
    return student_t_quantile((1.0 + confidence) / 2.0, n - 1) * std / math.sqrt(n)


@SAMPLE_SOURCES.register(
    "xrpo",
    formula="h_q(n) = t_{(1+c)/2, n−1}·s_q/√n; Π_q = h_q(n_q) − h_q(n_q+1) + λ·√(ln T / n_q) (T = samples of the "
    "step so far); ⌊b·P⌋ extra samples given one at a time to argmax Π_q (n_q, T += 1), at most k_max per prompt; "
    "optional hint guidance for prompts whose last visit had no reward > 0",
    source="[241] XRPO (rollout allocator; in-context seeding)",
    summary="A second round spends a fixed extra budget on the prompts whose reward-mean confidence interval would "
    "shrink most (plus an exploration bonus); prompts that earned nothing last time can get an exemplar as a hint.",
)
class XRPOAllocator(RuleDefaults):
    """[241] XRPO's exploration: an uncertainty-reduction rollout allocator and in-context seeding.

    After the first rollout, the uncertainty of prompt ``q``'s mean reward from ``n_q`` samples is the half-width
    ``h_q(n) = t_{(1+c)/2, n−1}·s_q/√n`` of its Student-t confidence interval (``s_q`` the sample std of its rewards).
    A budget of ``⌊b·P⌋`` extra samples (``P`` prompts of the step) is handed out one at a time to the prompt of
    largest priority ``Π_q = h_q(n_q) − h_q(n_q + 1) + λ·√(ln T / n_q)`` (the interval's expected shrinkage plus a
    UCB-style exploration bonus; ``T`` the step's samples so far), ``s_q`` held fixed, ties to the earlier prompt.

    In-context seeding (optional, ``hint_column``): a prompt whose last visit earned no reward above 0 gets its row's
    ``hint_column`` text (a curated exemplar) as guidance ``{"hint": text}`` on its next visit.

    Reading chosen: the allocation runs in one extra round (the paper allocates in phases); ``s_q`` comes from the
    raw weighted reward sums; the confidence ``c = 0.95``, ``λ = 0.1``, ``b = 0.5`` and ``max_extra`` defaults are
    genalign's choices. The t quantile for ``ν >= 3`` is an expansion (:func:`student_t_quantile`).

    Args:
        budget: ``b >= 0``, extra samples per prompt of the step.
        confidence: ``c`` in ``(0, 1)``.
        exploration: ``λ >= 0``.
        max_extra: the most extra samples per prompt (>= 1).
        hint_column: row column holding the exemplar for in-context seeding (None = no seeding).
    """

    rounds = 2

    def __init__(
        self, *, budget: float = 0.5, confidence: float = 0.95, exploration: float = 0.1, max_extra: int = 8,
        hint_column: str | None = None,
    ) -> None:  # fmt: skip
        if not budget >= 0:
            raise ValueError(f"budget = {budget!r} must be >= 0 (extra samples per prompt of the step)")
        check_fraction("confidence", confidence, low_open=True, high_open=True)
        if not exploration >= 0:
            raise ValueError(f"exploration = {exploration!r} must be >= 0")
        _check_count("max_extra", max_extra)
        if hint_column is not None and not (isinstance(hint_column, str) and hint_column):
            raise ValueError(f"hint_column = {hint_column!r} must be a column name or None")
        self.budget, self.confidence, self.exploration, self.max_extra = budget, confidence, exploration, max_extra
        self.hint_column = hint_column
        self.needs_guidance = frozenset({"hint"}) if hint_column else frozenset()
        self.unsolved: set[int] = set()  # data-row indices whose last visit earned no reward > 0

    def priority(self, std: float, n: int, total: int) -> float:
        """``Π = h(n) − h(n + 1) + λ·√(ln T / n)``."""
        shrink = half_width(std, n, self.confidence) - half_width(std, n + 1, self.confidence)
        return shrink + self.exploration * math.sqrt(math.log(max(total, 1)) / max(n, 1))

    def more_samples(self, outcome: Outcome) -> dict[int, int]:
        valid = ~outcome.rewards.isnan()  # [N]
        positions = per_prompt(outcome).positions
        counts, stds = [], []
        for position in positions:
            rewards = outcome.rewards[(outcome.positions == position) & valid].double()  # [n_q]
            counts.append(rewards.numel())
            stds.append(float(rewards.std()) if rewards.numel() > 1 else 0.0)
        total, extra = int(valid.sum()), [0] * len(positions)
        for _ in range(math.floor(self.budget * len(positions))):
            scores = [
                self.priority(s, n + e, total) if e < self.max_extra else -math.inf
                for s, n, e in zip(stds, counts, extra)
            ]
            best = max(range(len(scores)), key=lambda q: (scores[q], -q), default=None)
            if best is None or scores[best] == -math.inf:
                break
            extra[best] += 1
            total += 1
        return {p: e for p, e in zip(positions, extra) if e > 0}

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        if self.hint_column is None:
            return pool
        seeded = []
        for candidate in pool:
            hint = candidate.row.get(self.hint_column)
            if candidate.index in self.unsolved and isinstance(hint, str) and hint:
                guidance = {**candidate.row.get(GUIDANCE_KEY, {}), "hint": hint}
                candidate = Candidate(candidate.position, candidate.index, {**candidate.row, GUIDANCE_KEY: guidance})
            seeded.append(candidate)
        return seeded

    def after_rewards(self, outcome: Outcome) -> Decision:
        valid = ~outcome.rewards.isnan()  # [N]
        for position in outcome.positions.unique().tolist():
            members = (outcome.positions == position) & valid  # [N]
            if not members.any():
                continue
            index = int(outcome.indices[members.nonzero()[0, 0]])
            if bool((outcome.rewards[members] <= 0).all()):
                self.unsolved.add(index)
            else:
                self.unsolved.discard(index)
        return Decision(stats={"unsolved_tracked": float(len(self.unsolved))})

    def state_dict(self) -> dict[str, Any]:
        return {"unsolved": sorted(self.unsolved)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.unsolved = {int(i) for i in state["unsolved"]}
