"""The sample-source contract: what a rule sees before the rollout and after the rewards, and what it may decide.

A rule is a small stateful object with seven stages (:class:`SampleRule`); :class:`RuleDefaults` gives the no-op
version of each, so a rule implements only the stages it changes. Rules are registered in :data:`SAMPLE_SOURCES` by
name with their keyword-only hyper-parameters as constructor arguments (validated at config load) and docs meta
(``formula``, ``source``, ``summary``; ``needs`` for rollout-structure fields such as ``truncated``; ``provides`` for
the ``source`` signals its decisions carry, :attr:`Decision.signals`).

Everything a rule sees is global (all processes), so every process holds the same rule state and makes the same
choices; rule state holds only JSON-able values and tensors (checkpointed without pickle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from genalign.registry import Registry


@dataclass(frozen=True)
class Candidate:
    """A prompt drawn from the stream: its global stream ``position`` (the group id of its samples), the ``index`` of
    its row in the training data (the same prompt in every epoch) and the ``row`` itself."""

    position: int
    index: int
    row: dict[str, Any]


@dataclass
class Outcome:
    """The samples of one step after the rewards, over all processes (``N`` samples).

    Attributes:
        positions: ``[N]`` long, stream position of each sample's prompt (its group id).
        indices: ``[N]`` long, data-row index of each sample's prompt.
        rewards: ``[N]`` float, the weighted sum of the sample's rewards (NaN = no reward applied), before the reward
            combiner and shaping (which may be group-relative).
        lengths: ``[N]`` float, valid actions of each sample (tokens for LMs).
        truncated: ``[N]`` bool, the completion hit the length limit (None when the family does not report it).
        progress: ``step / max_steps``.
        forced: ``[N]`` bool, the sample was added by :meth:`SampleRule.forced_samples` (replayed or a reference
            solution), not sampled this step (None = none was).
        tokens: ``[N, T]`` long action ids, 0 on padding (only when a rule sets ``needs_tokens``; token families).
        behaviour_logp: ``[N, T]`` float log-probs of the policy that produced each action (with ``tokens``).
        round: the sampling round these samples complete (0 = the step's first rollout).
        step: the training step.
    """

    positions: Tensor
    indices: Tensor
    rewards: Tensor
    lengths: Tensor
    truncated: Tensor | None
    progress: float
    forced: Tensor | None = None
    tokens: Tensor | None = None
    behaviour_logp: Tensor | None = None
    round: int = 0
    step: int = 0

    def completion(self, sample: int) -> tuple[Tensor, Tensor]:
        """The action ids ``[T_i]`` and behaviour log-probs ``[T_i]`` of ``sample`` (needs ``tokens``)."""
        assert self.tokens is not None and self.behaviour_logp is not None, "set needs_tokens on the rule"
        length = int(self.lengths[sample])
        return self.tokens[sample, :length].clone(), self.behaviour_logp[sample, :length].clone()

    def __len__(self) -> int:
        return self.positions.shape[0]


@dataclass
class Decision:
    """What a rule decides about the samples of an :class:`Outcome` (every mask ``[N]`` bool, None = all True).

    Attributes:
        keep: samples that form the groups: the others are dropped before the advantages (GFPO's filtered subset).
        train: samples that enter the loss: the others keep their place in the group statistics but get zero loss
            weight (DAPO's overlong filtering).
        stats: statistics for the step record, logged as ``sampling/<rule>/<key>``.
        signals: ``[N]`` per-sample values of declared signals whose producer is ``source`` (the rule lists them in
            its registry meta ``provides``), for every sample of the outcome: the trainer adds each process's share
            to its rollout's structure, where reward shapers and credit rules read them by name (e.g. the exit order
            of S-GRPO's serial groups [14], which samples ICPO guided [44]).
    """

    keep: Tensor | None = None
    train: Tensor | None = None
    stats: dict[str, float] = field(default_factory=dict)
    signals: dict[str, Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class Forced:
    """A sample a rule adds to a group without sampling it (:meth:`SampleRule.forced_samples`).

    Attributes:
        position: the stream position (group) it joins; it must be a prompt of the current step.
        tokens: ``[T]`` long action ids of the completion (the policy's tokenizer; ending with the end token when the
            completion ended), or None when ``text`` is given; with ``teacher_writes`` the start the teacher
            continues (empty: the teacher writes the whole completion).
        text: the completion as text (a reference solution), tokenized by the policy, which appends the end token.
        behaviour_logp: ``[T]`` float log-probs of the policy that produced it (replay: the importance weights and the
            off-policy clip [323] use them), or None for text no policy sampled (a reference solution), which is
            scored by the current policy; a NaN entry marks one token no policy sampled (a cue the rule inserted),
            scored by the current policy too.
        kind: what it is, for the statistics (``replay``, ``reference``, ...).
        continues: ``tokens`` are only the start of the completion: the policy samples the rest with its training
            sampling settings (a *forced continuation*: an exit cue after part of a reasoning path [14], a prefix of a
            historical policy's completion [134]); the sampled tokens' behaviour log-probs are recorded as in a
            rollout. A start that already ends (its end token) is not continued.
        teacher_writes: the teacher (``algorithm.teacher``) writes after ``tokens`` first, sampling with the policy's
            training sampling settings (:meth:`~genalign.teachers.base.Teacher.write`); its tokens keep the teacher's
            sampling log-probs as behaviour log-probs (off-policy tokens: the off-policy clip [323] weighs them by
            ``πθ/π_teacher``). Then, with ``continues``, the policy samples the rest. Only rules that set
            ``teacher_writes`` (:class:`RuleDefaults`) add such samples.
        teacher_tokens: the most tokens the teacher writes (None: until it ends or reaches ``max_new_tokens``).
    """

    position: int
    tokens: Tensor | None
    behaviour_logp: Tensor | None
    kind: str = "replay"
    text: str | None = None
    continues: bool = False
    teacher_writes: bool = False
    teacher_tokens: int | None = None

    def __post_init__(self) -> None:
        assert (self.tokens is None) != (self.text is None), "give the completion as tokens or as text"
        assert not (self.continues and self.tokens is None), "a forced continuation starts from tokens"
        assert not (self.teacher_writes and self.tokens is None), "the teacher continues tokens (maybe none)"
        assert self.teacher_tokens is None or (self.teacher_writes and self.teacher_tokens >= 1), "teacher_tokens >= 1"


class SampleRule(Protocol):
    """One composable rule of the sample-source stage (``algorithm.sample_sources``)."""

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        """Before the rollout: the candidates (a subset of ``pool``, in the order to use them) this rule admits when
        ``wanted`` more prompts are needed; ``generator`` is seeded by (seed, step), the same on every process."""
        ...

    def samples_per_prompt(self, group_size: int) -> int | None:
        """Samples to draw per prompt (None = ``algorithm.group_size``)."""
        ...

    def more_samples(self, outcome: Outcome) -> dict[int, int]:
        """After the rewards of a sampling round (``outcome.round``; the samples of all rounds so far): extra samples
        to draw now, by stream position (adaptive budgets: DARS, AR3PO, AERO). No state change here: the rule
        updates its state in :meth:`after_rewards`. Called while some rule asks and the rounds stay below
        ``max(rule.rounds)``."""
        ...

    def round_guidance(self, outcome: Outcome) -> dict[int, dict[str, Any]]:
        """With :meth:`more_samples`: guidance (keys of ``GUIDANCE_KEY``, :mod:`genalign.policies.base`) for the
        extra samples of these prompts drawn in the next round only; its keys replace those of the guidance the
        prompt was planned with (e.g. iGRPO's best draft [100], RC-GRPO's reward-goal token [128]). No state change
        here."""
        ...

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        """After the last round: samples to add to this step's groups without sampling them (replay, reference
        solutions, forced continuations); their rewards are computed like any sample's. No state change here."""
        ...

    def after_rewards(self, outcome: Outcome) -> Decision:
        """After the rewards of every sample of the step (forced ones included, ``outcome.forced``): update the
        rule's state from ``outcome`` and decide which samples to keep and train."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class RuleDefaults:
    """No-op stages, for rules that change only some of them. ``pool`` is how many candidates per wanted prompt the
    rule wants to choose from in one round; ``max_draw`` caps the candidates drawn per step, per prompt of the step."""

    pool: float = 1.0
    max_draw: float = 1.0
    rounds: int = 1  # sampling rounds per step this rule may ask for (1 = the first rollout only)
    needs_tokens: bool = False  # the rule reads Outcome.tokens / behaviour_logp (token families only)
    forces: bool = False  # the rule adds samples with forced_samples (families with forced_completions only)
    needs_guidance: frozenset[str] = frozenset()  # guidance keys the rule attaches to rows (GUIDANCE_KEY)
    teacher_writes: bool = False  # some of its forced samples are written by algorithm.teacher (Forced.teacher_writes)

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        return pool

    def samples_per_prompt(self, group_size: int) -> int | None:
        return None

    def more_samples(self, outcome: Outcome) -> dict[int, int]:
        return {}

    def round_guidance(self, outcome: Outcome) -> dict[int, dict[str, Any]]:
        return {}

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        return []

    def after_rewards(self, outcome: Outcome) -> Decision:
        return Decision()

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


#: name -> rule class; constructor keywords are the hyper-parameters (``algorithm.sample_sources: [{name, ...}]``)
SAMPLE_SOURCES: Registry[type] = Registry("sample source", catalogue="genalign.experimental.sampling")


@dataclass
class PromptOutcome:
    """Per-prompt view of an :class:`Outcome` (``P`` prompts, in order of first appearance)."""

    positions: list[int]
    indices: list[int]
    mean: list[float]  # mean of the valid rewards, clamped to [0, 1] (NaN when none is valid)
    valid: list[int]  # number of valid rewards
    successes: list[float]  # sum of the valid rewards clamped to [0, 1]


def per_prompt(outcome: Outcome) -> PromptOutcome:
    """Group the outcome by prompt (stream position); rewards are clamped to ``[0, 1]`` (a success degree)."""
    positions, inverse = outcome.positions.unique(sorted=False, return_inverse=True)
    first = torch.full((positions.shape[0],), len(outcome), dtype=torch.long)
    first = first.scatter_reduce(0, inverse, torch.arange(len(outcome)), reduce="amin")  # [P]
    order = first.argsort()  # prompts in order of first appearance
    valid = ~outcome.rewards.isnan()  # [N]
    success = torch.where(valid, outcome.rewards.double().clamp(0.0, 1.0), 0.0)  # [N]
    sums = torch.zeros(positions.shape[0], dtype=torch.float64).index_add_(0, inverse, success)  # [P]
    counts = torch.zeros(positions.shape[0], dtype=torch.long).index_add_(0, inverse, valid.long())  # [P]
    mean = torch.where(counts > 0, sums / counts.clamp_min(1), float("nan"))  # [P]
    return PromptOutcome(
        positions=positions[order].tolist(),
        indices=outcome.indices[first[order]].tolist(),
        mean=mean[order].tolist(),
        valid=counts[order].tolist(),
        successes=sums[order].tolist(),
    )


def check_off_policy_sources(cfg: Any) -> None:
    """Reject an ``AlgorithmConfig`` whose sample sources replay off-policy completions (registry meta
    ``off_policy``) without the off-policy clip [323]: under any other clip form the stored behaviour log-probs are
    not the ratio's denominator, so replayed samples get no importance correction. Raises ``ValueError`` naming the
    fields and the fix."""
    from genalign.algorithms.objectives import OBJECTIVES

    names = [rule.name for rule in cfg.sample_sources]
    replaying = [n for n in names if n in SAMPLE_SOURCES and SAMPLE_SOURCES.meta(n).get("off_policy")]
    if not replaying:
        return
    label = f"algorithm.sample_sources rule {replaying[0]!r} replays off-policy completions"
    if not OBJECTIVES.meta(cfg.objective.name).get("ratio", False):
        raise ValueError(
            f"{label}, but algorithm.objective = {cfg.objective.name!r} is not a ratio objective, so they get no "
            "importance weight; set algorithm.objective = clipped_ratio with algorithm.clip = off_policy, or remove "
            "the rule."
        )
    if cfg.clip.name != "off_policy":
        raise ValueError(
            f"{label}, but algorithm.clip = {cfg.clip.name!r} gives them no importance correction for the policy that "
            "sampled them; set algorithm.clip = off_policy (ratio πθ/π_behaviour, trust region around the current "
            "iterate [323]) or remove the rule."
        )
