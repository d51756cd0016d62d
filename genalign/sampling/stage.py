"""The sample-source stage: between the prompt stream and the rollout, a list of composable, stateful rules
(``algorithm.sample_sources``) decides which prompts to sample and how many samples each (:meth:`plan`, once before
the rollout); after each round's rewards whether some prompts get more samples (:meth:`more_samples`, adaptive
budgets) and with what guidance (:meth:`sampling_row`); after the last round which stored, reference or continued
samples join the groups (:meth:`forced_samples`, replay and guidance); and after every reward of the step which
samples form the groups and which enter the loss, updating the rules' state and collecting their per-sample signals
(:meth:`decide`). :meth:`observe` turns this process's samples into the global :class:`Outcome` the
rules read. With no rules the stage takes ``count`` prompts from the stream and changes nothing.

Every process runs the same plan on the same stream (and keeps its share), and every rule sees the outcome of all
processes, so the rules' states agree across processes; their state is saved in the checkpoint (:meth:`state_dict`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from genalign.policies.base import GUIDANCE_KEY
from genalign.registry import Option
from genalign.sampling.base import SAMPLE_SOURCES, Candidate, Decision, Forced, Outcome, SampleRule


class Stream(Protocol):
    """What the stage needs from :class:`genalign.sampling.prompt_stream.PromptStream`."""

    def take(self, count: int) -> list[tuple[int, dict[str, Any]]]: ...

    def row_index(self, position: int) -> int: ...


@dataclass
class SamplePlan:
    """The prompts of one step (all processes) and the samples to draw for each."""

    prompts: list[Candidate]
    samples_per_prompt: int


@dataclass
class SampleChoice:
    """This process's samples after the rewards: ``keep`` ``[m]`` long indices of the samples that form the groups
    (None = all), ``train`` ``[m]`` bool, which of those enter the loss (None = all), the step's statistics, and the
    rules' ``source`` signals of this process's samples (``[n]`` each, before ``keep``: :attr:`Decision.signals`)."""

    keep: Tensor | None
    train: Tensor | None
    stats: dict[str, float] = field(default_factory=dict)
    signals: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class LocalSamples:
    """This process's samples as the stage sees them: ``group_ids`` ``[n]`` stream positions, ``rewards`` ``[n]``
    weighted reward sums (NaN = none applied), ``lengths`` ``[n]`` valid actions, ``truncated`` ``[n]`` bool or None,
    ``forced`` ``[n]`` bool (added without sampling) or None, ``tokens`` / ``behaviour_logp`` ``[n, T]`` action ids and
    behaviour log-probs (token families; None otherwise)."""

    group_ids: Tensor
    rewards: Tensor
    lengths: Tensor
    truncated: Tensor | None = None
    forced: Tensor | None = None
    tokens: Tensor | None = None
    behaviour_logp: Tensor | None = None


def _pad_right(tensor: Tensor, width: int) -> Tensor:
    """``[n, T]`` zero-padded (or cut) to ``[n, width]``."""
    if tensor.shape[1] >= width:
        return tensor[:, :width]
    return torch.cat([tensor, tensor.new_zeros(tensor.shape[0], width - tensor.shape[1])], dim=1)


def build_rules(options: Sequence[Option]) -> list[tuple[str, SampleRule]]:
    """Instantiate the configured options (``algorithm.sample_sources``) from :data:`SAMPLE_SOURCES`, as ``(name,
    rule)`` pairs (raises on a bad name or value)."""
    return [(option.name, SAMPLE_SOURCES.get(option.name)(**option.args)) for option in options]


def _identity(tensor: Tensor) -> Tensor:
    return tensor


class SampleSourceStage:
    """The configured rules, in order.

    Args:
        rules: ``(name, rule)`` pairs (:func:`build_rules`).
        seed: run seed; the choices of step ``s`` use a generator seeded by ``(seed, s)`` (the same on every process).
        group_size: ``algorithm.group_size``, the samples per prompt unless a rule asks for more.
        rank: this process's rank; ``gather`` concatenates a ``[n, ...]`` tensor over processes in rank order.
    """

    def __init__(
        self,
        rules: list[tuple[str, SampleRule]],
        *,
        seed: int,
        group_size: int,
        rank: int = 0,
        gather: Callable[[Tensor], Tensor] = _identity,
    ) -> None:
        self.rules, self.seed, self.group_size, self.rank, self.gather = rules, seed, group_size, rank, gather
        asked = [n for _, rule in rules if (n := rule.samples_per_prompt(group_size)) is not None]
        if len(asked) > 1:
            raise ValueError(f"more than one sample source sets the samples per prompt ({asked}); keep one of them.")
        self.samples_per_prompt = asked[0] if asked else group_size
        self._candidates: dict[int, Candidate] = {}  # stream position -> prompt, for the current step
        self._round_rows: dict[int, dict[str, Any]] = {}  # stream position -> its row for the next round's samples
        self._plan_stats: dict[str, float] = {}
        self._round_stats: dict[str, float] = {}
        self._share = (0, 0)  # (first index, count) of this process's samples in the last outcome

    def plan(self, stream: Stream, count: int, step: int) -> SamplePlan:
        """The ``count`` prompts of step ``step``: candidates are drawn from ``stream`` in rounds and passed through
        the rules in order until ``count`` are admitted or the draw limit (``count × max(pool, max_draw)`` of the
        rules) is reached; a shortfall is filled with passed-over candidates in draw order. Those refilled candidates
        do not pass through the rules' ``choose`` again, so they carry no guidance a later rule would have attached."""
        if not self.rules:
            prompts = [Candidate(p, stream.row_index(p), row) for p, row in stream.take(count)]
            self._candidates, self._round_rows = {c.position: c for c in prompts}, {}
            return SamplePlan(prompts, self.samples_per_prompt)
        generator = torch.Generator().manual_seed((self.seed * 1_000_003 + step * 7_919) % 2**63)
        pool_factor = max(rule.pool for _, rule in self.rules)
        limit = math.ceil(count * max(pool_factor, *(rule.max_draw for _, rule in self.rules)))
        chosen: list[Candidate] = []
        passed_over: list[Candidate] = []
        drawn = 0
        while len(chosen) < count and drawn < limit:
            wanted = count - len(chosen)
            size = min(math.ceil(wanted * pool_factor), limit - drawn)
            pool = [Candidate(p, stream.row_index(p), row) for p, row in stream.take(size)]
            drawn += size
            admitted = pool
            for _, rule in self.rules:
                admitted = rule.choose(admitted, wanted, generator)
            taken = admitted[:wanted]
            chosen += taken
            positions = {c.position for c in taken}
            passed_over += [c for c in pool if c.position not in positions]
        refilled = count - len(chosen)
        chosen += passed_over[:refilled]
        self._candidates, self._round_rows = {c.position: c for c in chosen}, {}
        self._plan_stats = {
            "sampling/prompts_drawn": float(drawn),
            "sampling/prompts_passed_over": float(drawn - count),
            "sampling/prompts_refilled": float(max(refilled, 0)),
        }
        return SamplePlan(chosen, self.samples_per_prompt)

    @property
    def rounds(self) -> int:
        """The most sampling rounds per step any rule asks for (1 = the first rollout only)."""
        return max((rule.rounds for _, rule in self.rules), default=1)

    @property
    def needs_tokens(self) -> bool:
        """Some rule reads the samples' action ids and behaviour log-probs (:attr:`Outcome.tokens`)."""
        return any(rule.needs_tokens for _, rule in self.rules)

    @property
    def forces(self) -> bool:
        """Some rule adds samples without sampling them (:meth:`forced_samples`)."""
        return any(rule.forces for _, rule in self.rules)

    @property
    def teacher_writes(self) -> bool:
        """Some rule adds samples the teacher writes (:attr:`Forced.teacher_writes`; needs ``algorithm.teacher``)."""
        return any(rule.teacher_writes for _, rule in self.rules)

    def view(self, rollout: Any, rewards: Tensor, forced: Tensor) -> LocalSamples:
        """This process's samples as the rules see them: a rollout (``genalign.policies.base.Rollout``), its weighted
        reward sums ``[n]`` and forced flags ``[n]``; the rollout signals the rules read (``truncated``, and
        ``action_ids`` with the behaviour log-probs when a rule stores samples)."""
        tokens = rollout.structure.get("action_ids") if self.needs_tokens else None
        return LocalSamples(
            group_ids=rollout.group_ids,
            rewards=rewards,
            lengths=rollout.action_mask.sum(1),
            truncated=rollout.structure.get("truncated"),
            forced=forced,
            tokens=tokens,
            behaviour_logp=rollout.old_logp if tokens is not None else None,
        )

    def candidate(self, position: int) -> Candidate:
        """The prompt of this step at stream ``position`` (its row carries the guidance the rules attached)."""
        return self._candidates[position]

    def sampling_row(self, position: int) -> dict[str, Any]:
        """The row the extra samples of prompt ``position`` are drawn with in the round :meth:`more_samples` just
        planned: the candidate's row, with the guidance keys the rules' :meth:`SampleRule.round_guidance` gave for
        that round replacing its own."""
        return self._round_rows.get(position, self._candidates[position].row)

    def observe(self, samples: LocalSamples, *, step: int, progress: float, round: int) -> Outcome:
        """The :class:`Outcome` of all processes' samples (this process's ``samples`` gathered with the others'),
        without changing any rule's state."""
        n = samples.group_ids.shape[0]
        flags = samples.truncated.double() if samples.truncated is not None else torch.full((n,), -1.0).double()
        forced = samples.forced if samples.forced is not None else torch.zeros(n, dtype=torch.bool)
        columns = [samples.group_ids, samples.rewards, samples.lengths, flags, forced]
        local = torch.stack([column.detach().cpu().double() for column in columns], dim=1)  # [n, 5]
        table = self.gather(local)  # [N, 5]
        self._share = (int(self.gather(torch.tensor([n]))[: self.rank].sum()), n)
        positions = table[:, 0].long()  # [N]
        tokens = behaviour_logp = None
        if self.needs_tokens and samples.tokens is not None and samples.behaviour_logp is not None:
            width = int(self.gather(torch.tensor([samples.tokens.shape[1]])).max()) if n or self.rank else 0
            tokens = self.gather(_pad_right(samples.tokens.detach().cpu().long(), width))  # [N, T]
            behaviour_logp = self.gather(_pad_right(samples.behaviour_logp.detach().cpu().float(), width))  # [N, T]
        return Outcome(
            positions=positions,
            indices=torch.tensor([self._candidates[p].index for p in positions.tolist()], dtype=torch.long),
            rewards=table[:, 1],
            lengths=table[:, 2],
            truncated=table[:, 3] > 0.5 if samples.truncated is not None else None,
            progress=progress,
            forced=table[:, 4] > 0.5,
            tokens=tokens,
            behaviour_logp=behaviour_logp,
            round=round,
            step=step,
        )

    def more_samples(self, outcome: Outcome) -> dict[int, int]:
        """Extra samples to draw after round ``outcome.round``, by stream position (the largest request of any rule
        for each prompt of the step; none once ``outcome.round + 1`` reaches :attr:`rounds`), and the guidance they
        are drawn with (:meth:`sampling_row`; rules in order, a later rule's keys replacing an earlier one's)."""
        wanted: dict[int, int] = {}
        guidance: dict[int, dict[str, Any]] = {}
        for name, rule in self.rules:
            if outcome.round + 1 >= rule.rounds:
                continue
            for position, count in rule.more_samples(outcome).items():
                if position not in self._candidates:
                    raise ValueError(f"sample source {name!r} asked for samples of prompt {position}, not in this step")
                if count > 0:
                    wanted[int(position)] = max(wanted.get(int(position), 0), int(count))
            for position, keys in rule.round_guidance(outcome).items():
                if position not in self._candidates:
                    raise ValueError(f"sample source {name!r} guided prompt {position}, not in this step")
                guidance[int(position)] = guidance.get(int(position), {}) | dict(keys)
        self._round_rows = {}
        for position, keys in guidance.items():
            row = self._candidates[position].row
            self._round_rows[position] = {**row, GUIDANCE_KEY: {**(row.get(GUIDANCE_KEY) or {}), **keys}}
        self._round_stats["sampling/rounds"] = float(outcome.round + 1 + bool(wanted))
        self._round_stats["sampling/extra_samples"] = self._round_stats.get("sampling/extra_samples", 0.0) + float(
            sum(wanted.values())
        )
        return wanted

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        """Samples the rules add without sampling (replay, reference solutions), in rule order."""
        forced: list[Forced] = []
        for name, rule in self.rules:
            added = rule.forced_samples(outcome)
            for item in added:
                if item.position not in self._candidates:
                    raise ValueError(
                        f"sample source {name!r} added a sample to prompt {item.position}, not in this step"
                    )
                if item.teacher_writes and not rule.teacher_writes:
                    raise ValueError(f"sample source {name!r} asked the teacher to write without declaring "
                                     "teacher_writes (the config check of algorithm.teacher reads it)")  # fmt: skip
            forced += added
        kinds: dict[str, float] = {}
        for item in forced:
            kinds[f"sampling/forced_{item.kind}"] = kinds.get(f"sampling/forced_{item.kind}", 0.0) + 1.0
        self._round_stats |= kinds
        return forced

    def decide(self, outcome: Outcome) -> SampleChoice:
        """Show the rules every sample of the step (after the last :meth:`observe`), let them update their state,
        and return this process's share of their decisions with the step's statistics."""
        keep = torch.ones(len(outcome), dtype=torch.bool)
        train = torch.ones(len(outcome), dtype=torch.bool)
        stats = dict(self._plan_stats) | self._round_stats
        self._round_stats = {}
        signals: dict[str, Tensor] = {}
        for name, rule in self.rules:
            decision: Decision = rule.after_rewards(outcome)
            keep &= decision.keep if decision.keep is not None else True
            train &= decision.train if decision.train is not None else True
            stats |= {f"sampling/{name}/{key}": float(value) for key, value in decision.stats.items()}
            for key, value in decision.signals.items():
                if key in signals or value.shape[:1] != (len(outcome),):
                    raise ValueError(f"sample source {name!r} gave signal {key!r} of shape {list(value.shape)}: each "
                                     f"signal comes from one rule, with one value per sample ({len(outcome)})")  # fmt: skip
                signals[key] = value
        if len(outcome):
            stats["sampling/frac_kept"] = float(keep.float().mean())
            stats["sampling/frac_trained"] = float((keep & train).float().mean())
        start, n = self._share
        keep, train = keep[start : start + n], train[start : start + n]  # this process's share
        kept = keep.nonzero().flatten()
        return SampleChoice(
            None if bool(keep.all()) else kept,
            None if bool(train[kept].all()) else train[kept],
            stats,
            {key: value[start : start + n] for key, value in signals.items()},
        )

    def after_rewards(self, samples: LocalSamples, *, step: int, progress: float) -> SampleChoice:
        """One-round shortcut: :meth:`observe` then :meth:`decide` (no rules: keep and train everything)."""
        if not self.rules:
            return SampleChoice(None, None)
        return self.decide(self.observe(samples, step=step, progress=progress, round=0))

    def state_dict(self) -> dict[str, Any]:
        """The state of every rule, by name (JSON-able values and tensors)."""
        return {name: rule.state_dict() for name, rule in self.rules}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the rules' states; a rule absent from ``state`` (added on resume) starts fresh."""
        for name, rule in self.rules:
            if name in state:
                rule.load_state_dict(state[name])
