"""Stored completions for the replay rules of :mod:`genalign.experimental.sampling.replay` (RePO [233], EFRame [166], AR3PO [106]).

- :class:`ReplayBuffer`: a bounded buffer of completions keyed by the prompt's data-row index (the same prompt in
  every epoch), each with its action ids, behaviour log-probs, reward and the step it was sampled at; checkpointed as
  flat tensors (no pickle).
- :func:`select_replays`: the replay strategies that pick ``k`` stored completions of one prompt.
- :class:`ReplayRule`: what the three rules share: the buffer, forced samples built from stored completions with
  their behaviour log-probs, the statistics (buffer size, replayed count, staleness in steps) and the state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from genalign.sampling.base import Forced, Outcome, RuleDefaults

#: ``recent``: the newest; ``random``: uniform without replacement; ``highest_reward``: the largest rewards;
#: ``max_variance``: the subset whose rewards vary most; ``all``: every stored completion (RePO's "full scope").
ReplayStrategy = Literal["recent", "random", "highest_reward", "max_variance", "all"]
STRATEGIES: tuple[str, ...] = ("recent", "random", "highest_reward", "max_variance", "all")


@dataclass(frozen=True)
class StoredSample:
    """One stored completion: ``tokens`` ``[T]`` long action ids, ``behaviour_logp`` ``[T]`` float32 log-probs of the
    policy that sampled it, its ``reward`` (weighted sum), the training ``step`` it was sampled at and its insertion
    ``serial`` (global order of insertion, oldest first)."""

    tokens: Tensor
    behaviour_logp: Tensor
    reward: float
    step: int
    serial: int


def check_count(name: str, value: Any, minimum: int = 1) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
        raise ValueError(f"{name} = {value!r} must be an integer >= {minimum}")


class ReplayBuffer:
    """Completions by data-row index, at most ``per_prompt`` per prompt and ``capacity`` in all.

    A prompt that is over ``per_prompt`` drops its oldest completion; a buffer over ``capacity`` drops the oldest
    completion of all (smallest insertion serial). Every process holds the same buffer (the rules see the outcome of
    all processes).

    Args:
        per_prompt: the most completions kept per prompt (>= 1).
        capacity: the most completions kept in all (>= 1).
    """

    def __init__(self, *, per_prompt: int, capacity: int) -> None:
        check_count("per_prompt", per_prompt)
        check_count("capacity", capacity)
        self.per_prompt, self.capacity = per_prompt, capacity
        self._entries: dict[int, list[StoredSample]] = {}  # data-row index -> completions, oldest first
        self._size = 0
        self._serial = 0

    def __len__(self) -> int:
        return self._size

    @property
    def prompts(self) -> int:
        """Prompts with at least one stored completion."""
        return len(self._entries)

    def stored(self, index: int) -> list[StoredSample]:
        """The completions stored for data row ``index``, oldest first."""
        return list(self._entries.get(index, ()))

    def add(self, index: int, tokens: Tensor, behaviour_logp: Tensor, reward: float, step: int) -> None:
        """Store a completion (``tokens`` ``[T]`` long, ``behaviour_logp`` ``[T]`` float) of data row ``index``,
        evicting the prompt's oldest beyond ``per_prompt`` and the buffer's oldest beyond ``capacity``."""
        assert tokens.ndim == 1 and tokens.shape == behaviour_logp.shape, "one completion: [T] tokens and log-probs"
        sample = StoredSample(
            tokens=tokens.detach().cpu().long().clone(),
            behaviour_logp=behaviour_logp.detach().cpu().float().clone(),
            reward=float(reward),
            step=int(step),
            serial=self._serial,
        )
        self._serial += 1
        items = self._entries.setdefault(int(index), [])
        items.append(sample)
        self._size += 1
        if len(items) > self.per_prompt:
            items.pop(0)
            self._size -= 1
        while self._size > self.capacity:
            oldest = min(self._entries, key=lambda i: self._entries[i][0].serial)
            self._entries[oldest].pop(0)
            self._size -= 1
            if not self._entries[oldest]:
                del self._entries[oldest]

    def state_dict(self) -> dict[str, Any]:
        """Flat tensors in insertion order (``M`` completions, ``L`` actions in all) and the next serial."""
        items = sorted((s for group in self._entries.values() for s in group), key=lambda s: s.serial)
        index_of = {id(s): i for i, group in self._entries.items() for s in group}
        return {
            "next_serial": self._serial,
            "index": torch.tensor([index_of[id(s)] for s in items], dtype=torch.long),  # [M]
            "serial": torch.tensor([s.serial for s in items], dtype=torch.long),  # [M]
            "step": torch.tensor([s.step for s in items], dtype=torch.long),  # [M]
            "reward": torch.tensor([s.reward for s in items], dtype=torch.float64),  # [M]
            "length": torch.tensor([s.tokens.shape[0] for s in items], dtype=torch.long),  # [M]
            "tokens": torch.cat([s.tokens for s in items]) if items else torch.zeros(0, dtype=torch.long),  # [L]
            "behaviour_logp": torch.cat([s.behaviour_logp for s in items]) if items else torch.zeros(0),  # [L]
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        lengths = state["length"].tolist()
        tokens = state["tokens"].long().split(lengths)
        logp = state["behaviour_logp"].float().split(lengths)
        self._entries, self._size = {}, len(lengths)
        for m, index in enumerate(state["index"].tolist()):
            sample = StoredSample(
                tokens[m].clone(), logp[m].clone(), float(state["reward"][m]), int(state["step"][m]),
                int(state["serial"][m]),
            )  # fmt: skip
            self._entries.setdefault(index, []).append(sample)
        self._serial = int(state["next_serial"])


def _max_variance(stored: list[StoredSample], k: int) -> list[StoredSample]:
    """The ``k`` completions whose rewards have the largest population variance (ties: the larger reward sum, then
    the earlier candidate). With rewards sorted, the best subset is the ``j`` lowest plus the ``k − j`` highest for
    some ``j``: swapping a chosen reward for an unchosen one changes ``k·Σr² − (Σr)²`` by a convex function of the
    new reward, largest at an end of any gap, so ``k + 1`` candidates cover the optimum."""
    order = sorted(range(len(stored)), key=lambda i: (stored[i].reward, stored[i].serial))
    best, best_key = [], (-float("inf"), -float("inf"))
    for j in range(k + 1):
        chosen = order[:j] + order[len(order) - (k - j) :]
        rewards = torch.tensor([stored[i].reward for i in chosen], dtype=torch.float64)  # [k]
        key = (float(rewards.var(unbiased=False)), float(rewards.sum()))
        if key > best_key:
            best, best_key = chosen, key
    return [stored[i] for i in sorted(best)]


def select_replays(
    stored: list[StoredSample], k: int, strategy: ReplayStrategy, generator: torch.Generator
) -> list[StoredSample]:
    """``k`` of one prompt's ``stored`` completions (all of them when fewer are stored; every one with ``all``).

    ``recent``: the ``k`` newest; ``random``: ``k`` uniformly without replacement (``generator``); ``highest_reward``:
    the ``k`` largest rewards, newest first among ties; ``max_variance``: the ``k`` whose rewards have the largest
    variance (:func:`_max_variance`). The result is in insertion order."""
    if strategy == "all" or len(stored) <= k:
        return list(stored)
    if strategy == "recent":
        return stored[-k:]
    if strategy == "random":
        picks = torch.randperm(len(stored), generator=generator)[:k].sort().values  # [k]
        return [stored[i] for i in picks.tolist()]
    if strategy == "highest_reward":
        order = sorted(range(len(stored)), key=lambda i: (-stored[i].reward, -stored[i].serial))
        return [stored[i] for i in sorted(order[:k])]
    if strategy == "max_variance":
        return _max_variance(stored, k)
    raise ValueError(f"strategy = {strategy!r} must be one of {', '.join(STRATEGIES)}")


def replay_generator(step: int, index: int) -> torch.Generator:
    """The generator of the ``random`` strategy for data row ``index`` at ``step``: a function of both only, so every
    process and a resumed run draw the same completions."""
    return torch.Generator().manual_seed((step * 1_000_003 + index * 7_919 + 17) % 2**63)


class ReplayRule(RuleDefaults):
    """Shared part of the replay rules: a :class:`ReplayBuffer`, forced samples from stored completions (their
    behaviour log-probs travel as ``Rollout.old_logp``, so the off-policy clip [323] weights them by
    ``πθ/π_behaviour``), and the statistics ``buffer_size``, ``buffer_prompts``, ``replayed`` and
    ``staleness_mean`` (steps between sampling and replay; NaN when nothing was replayed)."""

    needs_tokens = True
    forces = True

    def __init__(self, *, per_prompt: int, capacity: int) -> None:
        self.buffer = ReplayBuffer(per_prompt=per_prompt, capacity=capacity)
        self._staleness: list[int] = []  # this step's replays (reset after the rewards, so never in a checkpoint)

    def replay(self, outcome: Outcome, position: int, picks: list[StoredSample]) -> list[Forced]:
        """Forced samples of ``picks`` for the group at stream ``position`` (records their staleness)."""
        self._staleness += [outcome.step - s.step for s in picks]
        return [Forced(position, s.tokens.clone(), s.behaviour_logp.clone(), kind="replay") for s in picks]

    def store(self, outcome: Outcome, which: Tensor) -> int:
        """Store the samples flagged in ``which`` ``[N]`` bool, except forced ones (never re-stored) and those without
        a reward; returns how many were stored."""
        fresh = which & ~outcome.rewards.isnan()  # [N]
        if outcome.forced is not None:
            fresh &= ~outcome.forced
        chosen = fresh.nonzero().flatten().tolist()
        for i in chosen:
            tokens, logp = outcome.completion(i)
            self.buffer.add(int(outcome.indices[i]), tokens, logp, float(outcome.rewards[i]), outcome.step)
        return len(chosen)

    def replay_stats(self) -> dict[str, float]:
        """The buffer and this step's replays (clears the step's record)."""
        staleness, self._staleness = self._staleness, []
        return {
            "buffer_size": float(len(self.buffer)),
            "buffer_prompts": float(self.buffer.prompts),
            "replayed": float(len(staleness)),
            "staleness_mean": sum(staleness) / len(staleness) if staleness else float("nan"),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": self.buffer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state["buffer"])
