"""Guidance rules: training prompts that the policy cannot solve get help it will not have at evaluation.

Two kinds of help, both for prompts whose group would otherwise carry no signal (every sample wrong, so every
group-relative advantage is zero):

* guidance attached to the prompt's row before the rollout (``row[GUIDANCE_KEY]``, rendered by the policy family as
  conditioning, never as actions): a self-sampled hint ([69] SAGE), a prefix of the reference solution under a
  success-rate controller ([77] AdaPrefix-GRPO), tiered hints after diagnosed stagnation ([250] Scaf-GRPO);
* samples inserted into an all-wrong group after the rewards (:meth:`forced_samples`, scored by the current policy):
  the reference solution ([253] GCPO) or a corrected wrong response ([99] EDGE-GRPO's guided error correction), each
  replacing one wrong sample so the group keeps its size (:mod:`genalign.experimental.sampling.references`).

Conventions shared by the rules: a sample *succeeds* when its weighted reward sum is ``≥ threshold``; a prompt's
success counts only the samples drawn for it (not inserted ones); per-prompt state is keyed by the data-row index
(the same prompt in every epoch). A rule copies the row it guides (the stream's rows are shared across epochs).
Evaluation rows come straight from the data, so the deployed policy is measured without any of this help.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

import torch

from genalign.policies.base import GUIDANCE_KEY
from genalign.sampling.base import SAMPLE_SOURCES, Candidate, Decision, Outcome, RuleDefaults


def attach(candidate: Candidate, **guidance: Any) -> Candidate:
    """``candidate`` with a copy of its row whose guidance holds these keys (a ``hint`` is appended to one already
    there, so rules compose; other keys replace)."""
    merged = dict(candidate.row.get(GUIDANCE_KEY) or {})
    for key, value in guidance.items():
        merged[key] = merged.get("hint", "") + value if key == "hint" else value
    return Candidate(candidate.position, candidate.index, {**candidate.row, GUIDANCE_KEY: merged})


def reference_of(row: dict[str, Any], column: str, rule: str) -> str | None:
    """The reference solution of ``row`` (None when empty); a row without the column is a configuration error."""
    if column not in row:
        raise ValueError(
            f"sample source {rule!r} reads the reference solution from column {column!r}, which the row lacks "
            f"(columns: {sorted(k for k in row if k != GUIDANCE_KEY)}); set its solution_column argument."
        )
    value = row[column]
    return str(value) if value not in (None, "") else None


@dataclass
class Group:
    """The samples drawn for one prompt of an outcome (``members``: indices in the outcome, in sampling order;
    inserted samples excluded)."""

    position: int
    index: int
    members: list[int]
    successes: int
    valid: int

    @property
    def rate(self) -> float:
        """Success rate of the valid samples (NaN without any)."""
        return self.successes / self.valid if self.valid else math.nan

    @property
    def all_wrong(self) -> bool:
        return self.valid > 0 and self.successes == 0


def groups_of(outcome: Outcome, threshold: float) -> list[Group]:
    """The drawn samples of each prompt of ``outcome``, in order of first appearance (NaN rewards are not valid)."""
    forced = outcome.forced if outcome.forced is not None else torch.zeros(len(outcome), dtype=torch.bool)
    valid = ~outcome.rewards.isnan() & ~forced  # [N]
    success = valid & (outcome.rewards >= threshold)  # [N]
    groups: dict[int, Group] = {}
    for i, position in enumerate(outcome.positions.tolist()):
        group = groups.setdefault(position, Group(position, int(outcome.indices[i]), [], 0, 0))
        if not forced[i]:
            group.members.append(i)
            group.valid += int(valid[i])
            group.successes += int(success[i])
    return list(groups.values())


def check_arg(name: str, ok: bool, value: Any, fix: str) -> None:
    if not ok:
        raise ValueError(f"{name} = {value!r} {fix}")


def _int_keys(values: dict[str, Any], cast: type) -> dict[int, Any]:
    return {int(k): cast(v) for k, v in values.items()}


@SAMPLE_SOURCES.register(
    "sage",
    formula="for a training prompt x (optionally only if its last group had no success): h ~ π(· | x ⊕ instruction("
    "reference)), then o_i ~ π(· | x ⊕ h); reward R(x, o_i) unchanged; evaluation uses h = ∅",
    source="[69] SAGE",
    summary="Self-hints: the policy writes a short hint for a hard prompt from its reference solution (privileged "
    "information), and the group is sampled with the hint in the prompt; the deployed policy gets no hint.",
)
class SAGE(RuleDefaults):
    """[69] SAGE: the policy samples a compact hint (a plan) for the prompt, then the group conditioned on it.

    Reading chosen: the abstract says hints are sampled by the model itself with privileged supervision; SAGE's code
    generates them from the reference solution when no sample of the prompt was right. genalign attaches the
    ``self_hint`` guidance (``instruction`` with ``{solution}`` replaced by the row's reference solution) to a
    prompt whose last visit had no success (``only_failed``; every training prompt otherwise). The policy samples one
    hint per prompt and visit, shared by its group (``hint_tokens`` at most), and renders it with ``template``; the
    hint tokens are conditioning, never trained. The default texts and ``hint_tokens`` are genalign's choices.

    Args:
        instruction: appended to the prompt to sample the hint; ``{solution}`` is replaced by the reference solution.
        solution_column: the row column with the reference solution (read only when ``instruction`` uses it).
        hint_tokens: the longest hint in tokens.
        template: how the hint is added to the prompt (``{hint}`` = the sampled text).
        only_failed: hint only prompts whose last group had no success (the first visit is unaided).
        threshold: a sample succeeds when its weighted reward is at least this.
    """

    needs_guidance = frozenset({"self_hint"})

    def __init__(
        self, *, instruction: str = "\nReference solution: {solution}\nGive a one-line hint for this problem, "
        "without its final answer.\nHint:", solution_column: str = "solution", hint_tokens: int = 64,
        template: str = "\nHint: {hint}\n", only_failed: bool = True, threshold: float = 0.5,
    ) -> None:  # fmt: skip
        check_arg("hint_tokens", isinstance(hint_tokens, int) and hint_tokens >= 1, hint_tokens, "must be an int >= 1")
        check_arg("template", "{hint}" in template, template, "must contain '{hint}'")
        check_arg("instruction", bool(instruction.strip()), instruction, "must be a non-empty instruction")
        self.instruction, self.solution_column, self.hint_tokens = instruction, solution_column, hint_tokens
        self.template, self.only_failed, self.threshold = template, only_failed, threshold
        self.failed: dict[int, bool] = {}  # data-row index -> its last group had no success
        self._hinted: set[int] = set()  # stream positions hinted this step

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        chosen = []
        for candidate in pool:
            if self.only_failed and not self.failed.get(candidate.index, False):
                chosen.append(candidate)
                continue
            instruction = self.instruction
            if "{solution}" in instruction:
                solution = reference_of(candidate.row, self.solution_column, "sage")
                if solution is None:
                    chosen.append(candidate)
                    continue
                instruction = instruction.replace("{solution}", solution)
            guidance = {"self_hint": instruction, "self_hint_tokens": self.hint_tokens}
            chosen.append(attach(candidate, **guidance, self_hint_template=self.template))
            self._hinted.add(candidate.position)
        return chosen

    def after_rewards(self, outcome: Outcome) -> Decision:
        groups = groups_of(outcome, self.threshold)
        hinted = [g for g in groups if g.position in self._hinted]
        for group in groups:
            if group.valid:
                self.failed[group.index] = group.all_wrong
        rates = [g.rate for g in hinted if g.valid]
        self._hinted = set()
        return Decision(stats={
            "hinted": float(len(hinted)),
            "hinted_success": sum(rates) / len(rates) if rates else math.nan,
            "tracked_failed": float(sum(self.failed.values())),
        })  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {"failed": {str(k): v for k, v in self.failed.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.failed = _int_keys(state["failed"], bool)


def reference_prefix(solution: str, fraction: float, unit: Literal["words", "chars"]) -> str:
    """The first ``⌈fraction · L⌉`` units of ``solution`` (``L`` its words — maximal runs of non-space characters,
    the text kept up to the end of the last one taken — or its characters)."""
    if fraction <= 0.0:
        return ""
    if unit == "chars":
        return solution[: math.ceil(fraction * len(solution))]
    ends = [match.end() for match in re.finditer(r"\S+", solution)]
    if not ends:
        return ""
    return solution[: ends[min(math.ceil(fraction * len(ends)), len(ends)) - 1]]


@SAMPLE_SOURCES.register(
    "adaprefix",
    formula="prefix of the reference: first ⌈f_x·L⌉ words (or characters), f applied = min(f_x, cap(progress)); "
    "after each visit f_x ← clip(f_applied + gain·(target − p_x), 0, max_fraction), p_x = the group's success rate; "
    "cap = max_fraction·clip((withdraw_end − progress)/(withdraw_end − withdraw_start), 0, 1)",
    source="[77] AdaPrefix-GRPO",
    summary="A per-prompt feedback controller on how much of the reference solution the completion is forced to "
    "start with, holding each prompt's success rate near 50%; the assistance is withdrawn entirely late in training.",
)
class AdaPrefix(RuleDefaults):
    """[77] AdaPrefix-GRPO: a reference-solution prefix whose length a feedback controller sets per prompt.

    The row's reference solution is cut to its first ``⌈f·L⌉`` words (``unit="words"``: runs of non-space
    characters, whitespace kept; ``"chars"``: characters) and attached as ``prefix`` guidance: the completion starts
    with it as conditioning (no loss, no gradient on its tokens), and the reward reads prefix + continuation. After a
    visit with success rate ``p`` at fraction ``f``, the prompt's fraction becomes ``clip(f + gain·(target − p), 0,
    max_fraction)``: more of the solution after a group below the target, less above it. A global cap withdraws the
    help: ``max_fraction`` until ``withdraw_start`` of training, falling linearly to 0 at ``withdraw_end`` (no
    prefix afterwards).

    Reading chosen: the abstract gives the target (50 %) and the withdrawal but not the controller's form; the
    proportional update, the linear withdrawal and the defaults other than ``target`` are genalign's choices.
    Training progress is not passed to ``choose``, so the rule takes it from the previous step's outcome plus one
    step (``(step + 1) / max_steps``, with ``max_steps = step / progress``).

    Args:
        target: the success rate the controller holds. gain: its step per unit of error. init: a new prompt's
            fraction. max_fraction: the largest fraction of the solution given.
        unit: ``"words"`` or ``"chars"``. withdraw_start, withdraw_end: training progress where the cap starts
            falling and where it reaches 0.
        solution_column: the row column with the reference solution. threshold: a sample succeeds at this reward.
    """

    needs_guidance = frozenset({"prefix"})

    def __init__(
        self, *, target: float = 0.5, gain: float = 0.5, init: float = 0.0, max_fraction: float = 1.0,
        unit: Literal["words", "chars"] = "words", withdraw_start: float = 0.6, withdraw_end: float = 0.8,
        solution_column: str = "solution", threshold: float = 0.5,
    ) -> None:  # fmt: skip
        for name, value in (("target", target), ("init", init), ("max_fraction", max_fraction)):
            check_arg(name, 0.0 <= value <= 1.0, value, "must be in [0, 1]")
        check_arg("gain", gain > 0, gain, "must be > 0 (the controller's step per unit of success-rate error)")
        check_arg("unit", unit in ("words", "chars"), unit, "must be 'words' or 'chars'")
        check_arg("withdraw_end", 0.0 <= withdraw_start <= withdraw_end, withdraw_end, f"must be >= withdraw_start "
               f"= {withdraw_start!r} >= 0 (training progress, 0..1; above 1 never withdraws)")  # fmt: skip
        self.target, self.gain, self.init, self.max_fraction, self.unit = target, gain, init, max_fraction, unit
        self.withdraw_start, self.withdraw_end = withdraw_start, withdraw_end
        self.solution_column, self.threshold = solution_column, threshold
        self.fractions: dict[int, float] = {}  # data-row index -> f_x
        self.step, self.max_steps = 0, 0  # the last outcome's step and the run's steps (0 = not known yet)
        self._applied: dict[int, float] = {}  # stream position -> fraction applied this step

    def cap(self) -> float:
        """The largest fraction allowed at this step's (estimated) training progress."""
        progress = (self.step + 1) / self.max_steps if self.max_steps else 0.0
        if progress >= self.withdraw_end:
            return 0.0
        span = self.withdraw_end - self.withdraw_start
        return self.max_fraction * min(1.0, (self.withdraw_end - progress) / span) if span > 0 else self.max_fraction

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        cap, chosen = self.cap(), []
        for candidate in pool:
            fraction = min(self.fractions.get(candidate.index, self.init), cap)
            solution = reference_of(candidate.row, self.solution_column, "adaprefix")
            prefix = reference_prefix(solution, fraction, self.unit) if solution else ""
            self._applied[candidate.position] = fraction if prefix else 0.0
            chosen.append(attach(candidate, prefix=prefix) if prefix else candidate)
        return chosen

    def after_rewards(self, outcome: Outcome) -> Decision:
        groups = groups_of(outcome, self.threshold)
        applied = [self._applied.get(g.position, 0.0) for g in groups]
        for group, fraction in zip(groups, applied, strict=True):
            if group.valid:
                updated = fraction + self.gain * (self.target - group.rate)
                self.fractions[group.index] = min(max(updated, 0.0), self.max_fraction)
        if outcome.step > 0 and outcome.progress > 0:
            self.step, self.max_steps = outcome.step, round(outcome.step / outcome.progress)
        rates = [g.rate for g in groups if g.valid]
        self._applied = {}
        return Decision(stats={
            "prefixed": float(sum(f > 0 for f in applied)),
            "fraction_mean": sum(applied) / len(applied) if applied else math.nan,
            "success_rate": sum(rates) / len(rates) if rates else math.nan,
            "cap": self.cap(),
        })  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        fractions = {str(k): v for k, v in self.fractions.items()}
        return {"fractions": fractions, "step": self.step, "max_steps": self.max_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.fractions = _int_keys(state["fractions"], float)
        self.step, self.max_steps = int(state["step"]), int(state["max_steps"])


@SAMPLE_SOURCES.register(
    "scaf",
    formula="stagnation: a prompt's group has no success on `patience` consecutive visits (after start_progress) → "
    "tier_x ← min(tier_x + 1, max_tier); a visit with a success resets the count; visits with tier_x > 0 carry "
    "hint tier_x of the row (1 abstract, 2 concrete, 3 steps) in the prompt",
    source="[250] Scaf-GRPO",
    summary="Diagnoses stagnation per prompt (all-wrong groups on consecutive visits) and only then injects in-prompt "
    "hints, escalating from abstract concepts to concrete steps while the stagnation persists.",
)
class ScafGRPO(RuleDefaults):
    """[250] Scaf-GRPO: tiered in-prompt hints for prompts whose learning has stalled.

    Every visit of a prompt at its current tier whose group has no success counts towards stagnation; after
    ``patience`` such visits in a row the prompt moves one tier up (at most ``max_tier``, and at most the hints its
    row has), and the count restarts; a visit with a success resets the count and keeps the tier (the least help that
    worked). Hints come from the row: ``hints`` names one column holding a list of texts (tier 1 first: an abstract
    concept, a concrete step, the solution steps) or a list of columns, one per tier; ``template`` renders them.
    Before ``start_progress`` of training (the guidance-exempt warm-up) no stagnation is counted.

    Reading chosen: the abstract names the diagnosis and the tiers but not the stagnation test nor its window;
    consecutive all-wrong visits, a tier kept after success, and the defaults are genalign's choices.

    Args:
        hints: the hint column (a list per row), or the list of hint columns by tier.
        patience: consecutive all-wrong visits at a tier that count as stagnation.
        max_tier: the highest tier. start_progress: training progress before which no stagnation is counted.
        template: how a hint is added to the prompt (``{hint}`` = the hint text). threshold: the success reward.
    """

    needs_guidance = frozenset({"hint"})

    def __init__(
        self, *, hints: str | list[str] = "hints", patience: int = 2, max_tier: int = 3, start_progress: float = 0.0,
        template: str = "\nHint: {hint}\n", threshold: float = 0.5,
    ) -> None:  # fmt: skip
        check_arg("patience", isinstance(patience, int) and patience >= 1, patience, "must be an int >= 1")
        check_arg("max_tier", isinstance(max_tier, int) and max_tier >= 1, max_tier, "must be an int >= 1")
        check_arg("start_progress", 0.0 <= start_progress <= 1.0, start_progress, "must be in [0, 1]")
        check_arg("template", "{hint}" in template, template, "must contain '{hint}'")
        check_arg("hints", isinstance(hints, str) or (isinstance(hints, list) and hints), hints,
               "must name a column of hint lists or be a non-empty list of columns by tier")  # fmt: skip
        self.hints, self.patience, self.max_tier, self.start_progress = hints, patience, max_tier, start_progress
        self.template, self.threshold = template, threshold
        self.tier: dict[int, int] = {}  # data-row index -> hint tier (0 = no hint)
        self.stuck: dict[int, int] = {}  # data-row index -> consecutive all-wrong visits at its tier
        self._hinted: dict[int, int] = {}  # stream position -> tier of the hint given this step

    def tiers(self, row: dict[str, Any]) -> list[str]:
        """The row's hints, tier 1 first."""
        columns = [self.hints] if isinstance(self.hints, str) else list(self.hints)
        missing = [c for c in columns if c not in row]
        if missing:
            raise ValueError(f"sample source 'scaf' reads hints from column {missing[0]!r}, which the row lacks "
                             f"(columns: {sorted(row)}); set its hints argument.")  # fmt: skip
        if isinstance(self.hints, str):
            value = row[self.hints]
            values = [value] if isinstance(value, str) else list(value or [])
        else:
            values = [row[c] for c in columns]
        return [str(v) for v in values if v not in (None, "")]

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        chosen = []
        for candidate in pool:
            tier = self.tier.get(candidate.index, 0)
            hints = self.tiers(candidate.row) if tier else []
            if not hints:
                chosen.append(candidate)
                continue
            tier = min(tier, len(hints))
            chosen.append(attach(candidate, hint=self.template.replace("{hint}", hints[tier - 1])))
            self._hinted[candidate.position] = tier
        return chosen

    def after_rewards(self, outcome: Outcome) -> Decision:
        groups = groups_of(outcome, self.threshold)
        escalated = 0
        if outcome.progress >= self.start_progress:
            for group in (g for g in groups if g.valid):
                if not group.all_wrong:
                    self.stuck[group.index] = 0
                    continue
                self.stuck[group.index] = self.stuck.get(group.index, 0) + 1
                if self.stuck[group.index] >= self.patience and self.tier.get(group.index, 0) < self.max_tier:
                    self.tier[group.index] = self.tier.get(group.index, 0) + 1
                    self.stuck[group.index] = 0
                    escalated += 1
        given = [self._hinted[g.position] for g in groups if g.position in self._hinted]
        self._hinted = {}
        return Decision(stats={
            "hinted": float(len(given)),
            "tier_mean": sum(given) / len(given) if given else 0.0,
            "escalated": float(escalated),
        })  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {"tier": {str(k): v for k, v in self.tier.items()}, "stuck": {str(k): v for k, v in self.stuck.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tier, self.stuck = _int_keys(state["tier"], int), _int_keys(state["stuck"], int)
