"""The sample-source stage: between the prompt stream and the rollout, a list of composable, stateful rules
(``algorithm.sample_sources``) decides which prompts to sample and how many samples each (:meth:`plan`, once before
the rollout), and after the rewards which samples form the groups and which enter the loss, updating the rules' state
(:meth:`after_rewards`, once after the rewards). With no rules the stage takes ``count`` prompts from the stream and
changes nothing.

Every process runs the same plan on the same stream (and keeps its share), and every rule sees the outcome of all
processes, so the rules' states agree across processes; their state is saved in the checkpoint (:meth:`state_dict`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from genalign.sampling.base import SAMPLE_SOURCES, Candidate, Decision, Outcome, SampleRule


class Stream(Protocol):
    """What the stage needs from :class:`genalign.trainer.data_stream.PromptStream`."""

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
    (None = all), ``train`` ``[m]`` bool, which of those enter the loss (None = all), and the step's statistics."""

    keep: Tensor | None
    train: Tensor | None
    stats: dict[str, float] = field(default_factory=dict)


def build_rules(rules: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, SampleRule]]:
    """Instantiate ``(name, hyper-parameters)`` pairs from :data:`SAMPLE_SOURCES` (raises on a bad name or value)."""
    return [(name, SAMPLE_SOURCES.get(name)(**args)) for name, args in rules]


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
        self._index_of: dict[int, int] = {}  # stream position -> data row index, for the current step
        self._plan_stats: dict[str, float] = {}

    def plan(self, stream: Stream, count: int, step: int) -> SamplePlan:
        """The ``count`` prompts of step ``step``: candidates are drawn from ``stream`` in rounds and passed through
        the rules in order until ``count`` are admitted or the draw limit (``count × max(pool, max_draw)`` of the
        rules) is reached; a shortfall is filled with passed-over candidates in draw order."""
        if not self.rules:
            prompts = [Candidate(p, stream.row_index(p), row) for p, row in stream.take(count)]
            self._index_of = {c.position: c.index for c in prompts}
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
        self._index_of = {c.position: c.index for c in chosen}
        self._plan_stats = {
            "sampling/prompts_drawn": float(drawn),
            "sampling/prompts_passed_over": float(drawn - count),
            "sampling/prompts_refilled": float(max(refilled, 0)),
        }
        return SamplePlan(chosen, self.samples_per_prompt)

    def after_rewards(self, group_ids: Tensor, rewards: Tensor, lengths: Tensor, truncated: Tensor | None,
                      progress: float) -> SampleChoice:  # fmt: skip
        """Show the rules this process's samples together with the other processes', collect their decisions and
        return this process's share.

        Args:
            group_ids: ``[n]`` stream position of each sample's prompt; rewards: ``[n]`` weighted reward sum (NaN =
            none applied); lengths: ``[n]`` valid actions; truncated: ``[n]`` bool or None; progress: step / max_steps.
        """
        if not self.rules:
            return SampleChoice(None, None)
        n = group_ids.shape[0]
        flags = truncated.double() if truncated is not None else torch.full((n,), -1.0, dtype=torch.float64)
        columns = [group_ids, rewards, lengths, flags]
        local = torch.stack([column.detach().cpu().double() for column in columns], dim=1)  # [n, 4]
        table = self.gather(local)  # [N, 4]
        start = int(self.gather(torch.tensor([n]))[: self.rank].sum())
        positions = table[:, 0].long()  # [N]
        outcome = Outcome(
            positions=positions,
            indices=torch.tensor([self._index_of[p] for p in positions.tolist()], dtype=torch.long),
            rewards=table[:, 1],
            lengths=table[:, 2],
            truncated=table[:, 3] > 0.5 if truncated is not None else None,
            progress=progress,
        )
        keep = torch.ones(len(outcome), dtype=torch.bool)
        train = torch.ones(len(outcome), dtype=torch.bool)
        stats = dict(self._plan_stats)
        for name, rule in self.rules:
            decision: Decision = rule.after_rewards(outcome)
            keep &= decision.keep if decision.keep is not None else True
            train &= decision.train if decision.train is not None else True
            stats |= {f"sampling/{name}/{key}": float(value) for key, value in decision.stats.items()}
        if len(outcome):
            stats["sampling/frac_kept"] = float(keep.float().mean())
            stats["sampling/frac_trained"] = float((keep & train).float().mean())
        keep, train = keep[start : start + n], train[start : start + n]  # this process's share
        kept = keep.nonzero().flatten()
        return SampleChoice(None if bool(keep.all()) else kept, None if bool(train[kept].all()) else train[kept], stats)

    def state_dict(self) -> dict[str, Any]:
        """The state of every rule, by name (JSON-able values and tensors)."""
        return {name: rule.state_dict() for name, rule in self.rules}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the rules' states; a rule absent from ``state`` (added on resume) starts fresh."""
        for name, rule in self.rules:
            if name in state:
                rule.load_state_dict(state[name])
