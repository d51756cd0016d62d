"""Replay rules: earlier completions of a prompt, with the behaviour log-probs of the policy that sampled them, join
its later groups as forced samples (RePO [233]; EFRame's replay [166]; AR3PO's response reuse [106]), plus the
exploration rounds and filters those methods pair with replay.

Replayed completions are off-policy: their ``Rollout.old_logp`` are the stored behaviour log-probs, and only the
off-policy clip [323] (``algorithm.clip: off_policy``) weights them by ``πθ/π_behaviour`` with the trust region around
the current iterate; :func:`genalign.sampling.base.check_off_policy_sources` rejects configs that replay without it. The buffers
(:mod:`genalign.experimental.sampling.replay_buffer`) are keyed by the prompt's data-row index, so a prompt's completions come back
when the stream visits it again (the next epoch, or a curriculum's revisit).
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.advantages.group_baselines import grpo
from genalign.experimental.sampling.replay_buffer import (
    STRATEGIES,
    ReplayRule,
    ReplayStrategy,
    check_count,
    replay_generator,
    select_replays,
)
from genalign.sampling.base import SAMPLE_SOURCES, Decision, Forced, Outcome, per_prompt


def _group_advantages(outcome: Outcome) -> Tensor:
    """``[N]`` GRPO advantages ``(r_i − mean_G)/(std_G + 1e-6)`` (unbiased std) over each prompt's samples, forced
    ones included; 0 for a sample without reward or alone in its group."""
    _, inverse, counts = outcome.positions.unique(return_inverse=True, return_counts=True)
    grouped = counts[inverse] >= 2  # [N]
    advantages = torch.zeros(len(outcome), dtype=torch.float64)  # [N]
    if bool(grouped.any()):
        advantages[grouped] = grpo(outcome.rewards.double()[grouped], outcome.positions[grouped])
    return torch.nan_to_num(advantages, nan=0.0)


@SAMPLE_SOURCES.register(
    "repo",
    formula="after the rollout, for each prompt x with |B_x| ≥ min_stored: add k = replays completions of B_x "
    "(strategy: recent / random / highest_reward / max_variance / all) to x's group with their behaviour log-probs; "
    "then B_x ← last per_prompt of B_x ∪ {this step's sampled completions of x}",
    source="[233] RePO",
    summary="Replay-enhanced policy optimisation: each group is enlarged with off-policy completions of the same "
    "prompt retrieved from a replay buffer (needs algorithm.clip: off_policy for the importance weights).",
    off_policy=True,
)
class RePO(ReplayRule):
    """[233] RePO: every prompt's group gets ``k`` off-policy completions of that prompt from a replay buffer.

    Each step's sampled completions of prompt ``x`` are appended to its buffer ``B_x`` (the newest ``per_prompt``
    kept, ``capacity`` in all, forced samples never re-stored). After the rollout, a prompt with ``|B_x| ≥
    min_stored`` gets ``replays`` completions of ``B_x``, chosen by ``strategy`` (:func:`select_replays`), added to
    its group with their stored behaviour log-probs; their rewards are recomputed, and the group's advantages are
    computed over on- and off-policy samples together. Retrieval precedes this step's storing, so a replayed
    completion is at least one step old.

    Reading chosen: the abstract names "diverse replay strategies" and 8 on- plus 8 off-policy samples per prompt. The
    authors' released training script offers all / random_k / highest_k / recent_k / max_variance_k and sets
    highest_k, 8 replays, a per-prompt cache of 16 and replay once 16 are cached: those are the defaults here
    (``capacity`` is genalign's bound on memory). Not reproduced: the script's option to normalise the advantages of
    on- and off-policy samples separately (here they share the group) and its off-policy loss weight (here 1).

    Args:
        replays: ``k``, off-policy completions added per prompt (>= 1).
        strategy: ``recent``, ``random``, ``highest_reward``, ``max_variance`` or ``all`` (every stored completion).
        per_prompt: completions kept per prompt; min_stored: completions a prompt needs before it is replayed
            (``<= per_prompt``); capacity: completions kept in all.
    """

    def __init__(
        self, *, replays: int = 8, strategy: ReplayStrategy = "highest_reward", per_prompt: int = 16,
        min_stored: int = 16, capacity: int = 16384,
    ) -> None:  # fmt: skip
        check_count("replays", replays)
        check_count("min_stored", min_stored)
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy = {strategy!r} must be one of {', '.join(STRATEGIES)}")
        super().__init__(per_prompt=per_prompt, capacity=capacity)
        if min_stored > per_prompt:
            raise ValueError(
                f"min_stored = {min_stored} exceeds per_prompt = {per_prompt}, so no prompt would ever be replayed; "
                "lower min_stored or raise per_prompt."
            )
        self.replays, self.strategy, self.min_stored = replays, strategy, min_stored

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        forced: list[Forced] = []
        prompts = per_prompt(outcome)
        for position, index in zip(prompts.positions, prompts.indices):
            stored = self.buffer.stored(index)
            if len(stored) < self.min_stored:
                continue
            picks = select_replays(stored, self.replays, self.strategy, replay_generator(outcome.step, index))
            forced += self.replay(outcome, position, picks)
        return forced

    def after_rewards(self, outcome: Outcome) -> Decision:
        self.store(outcome, torch.ones(len(outcome), dtype=torch.bool))
        return Decision(stats=self.replay_stats())


def _first_round(positions: Tensor, forced: Tensor, counts: dict[int, int]) -> Tensor:
    """``[N]`` bool: a sampled (not forced) sample among the first ``counts[p]`` of its group ``p`` in outcome order
    (the first round; a group's later rounds follow it, since one process samples all of a prompt's rounds)."""
    first = torch.zeros(positions.shape[0], dtype=torch.bool)
    seen: dict[int, int] = {}
    for i, (position, is_forced) in enumerate(zip(positions.tolist(), forced.tolist())):
        if is_forced:
            continue
        seen[position] = seen.get(position, 0) + 1
        first[i] = seen[position] <= counts.get(position, seen[position])
    return first


@SAMPLE_SOURCES.register(
    "eframe",
    formula="explore: a group with no success (all clip(r,0,1) = 0) gets extra_samples more; filter (Â GRPO over the "
    "whole group): train iff |Â_i| > min_advantage, extra-round samples iff |Â_i| > explore_advantage, and not "
    "(truncated and Â_i > 0); replay: store trained sampled completions with Â_i > replay_advantage, add the "
    "replays newest stored ones of each prompt to its later groups",
    source="[166] EFRame",
    summary="Exploration-Filter-Replay: extra rollouts for failed prompts, online filtering of uninformative "
    "samples, and a buffer of rare high-advantage trajectories replayed into later groups of their prompts.",
    off_policy=True,
)
class EFRame(ReplayRule):
    """[166] EFRame: additional rollouts for prompts whose group failed, online filtering of low-quality samples, and
    replay of rare informative trajectories.

    - Exploration: after the first round, a prompt none of whose samples succeeded (every ``clip(r, 0, 1) = 0``) gets
      ``extra_samples`` more in a second round (``rounds = 2``).
    - Filter (``Decision.train``; the samples keep their place in the group statistics): with ``Â`` the GRPO
      advantage over the prompt's whole group, a sample enters the loss iff ``|Â| > min_advantage`` (zero-advantage
      samples carry no signal and only dilute the normaliser); an extra-round sample also needs ``|Â| >
      explore_advantage`` (the rare successes, not the bulk of further failures); with ``filter_overlong``, a
      truncated sample with ``Â > 0`` is left out (an unfinished completion is not rewarded).
    - Replay: trained sampled completions with ``Â > replay_advantage`` are stored (``per_prompt`` newest per prompt,
      ``capacity`` in all); when the stream brings their prompt back, its ``replays`` newest stored completions join
      the group with their behaviour log-probs.

    Reading chosen: the abstract gives no formulas. The authors' released code draws ``additional_n = 20`` more
    samples of all-zero groups (its ``n = 5``), keeps first-round samples with ``|A| > 0.05`` and extra samples with
    ``|A| > 1`` (advantages of the extra batch alone; here over the whole group, which is the group the update
    uses), drops truncated positive samples, and stores samples with ``|A| > 1`` for a separate update every 5 steps
    on the buffer. genalign replays into later groups of the same prompt instead of a separate update (the sample
    source only adds samples to this step's groups) and stores positive ones only (rare successes). The code also
    raises the temperature of the extra rollouts (1.2); a rule's row guidance is fixed when the step is planned,
    before failure is known, so the extra round samples at the policy's temperature. ``replays``, ``per_prompt`` and
    ``capacity`` are genalign's choices.

    Args:
        extra_samples: samples added to a failed prompt (>= 1).
        min_advantage, explore_advantage, replay_advantage: ``|Â|`` thresholds (>= 0) of the filter, of extra-round
            samples, and (``Â >``) of storing.
        filter_overlong: leave truncated samples with ``Â > 0`` out of the loss (a family that reports no
            ``truncated`` flags has none to leave out).
        replays: stored completions added per prompt; per_prompt, capacity: the buffer's bounds.
    """

    rounds = 2

    def __init__(
        self, *, extra_samples: int = 20, min_advantage: float = 0.05, explore_advantage: float = 1.0,
        replay_advantage: float = 1.0, filter_overlong: bool = True, replays: int = 1, per_prompt: int = 4,
        capacity: int = 4096,
    ) -> None:  # fmt: skip
        check_count("extra_samples", extra_samples)
        check_count("replays", replays)
        for name, value in (("min_advantage", min_advantage), ("explore_advantage", explore_advantage),
                            ("replay_advantage", replay_advantage)):  # fmt: skip
            if not value >= 0:
                raise ValueError(f"{name} = {value!r} must be >= 0 (a threshold on |advantage|)")
        super().__init__(per_prompt=per_prompt, capacity=capacity)
        self.extra_samples, self.replays, self.filter_overlong = extra_samples, replays, filter_overlong
        self.min_advantage, self.explore_advantage = min_advantage, explore_advantage
        self.replay_advantage = replay_advantage
        self._first_counts: dict[int, int] = {}  # this step's first-round samples per prompt (reset after rewards)

    def more_samples(self, outcome: Outcome) -> dict[int, int]:
        if outcome.round == 0:
            positions, counts = outcome.positions.unique(return_counts=True)  # [P], [P]
            self._first_counts = dict(zip(positions.tolist(), counts.tolist()))
        prompts = per_prompt(outcome)
        return {
            position: self.extra_samples
            for position, valid, successes in zip(prompts.positions, prompts.valid, prompts.successes)
            if valid > 0 and successes == 0.0
        }

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        forced: list[Forced] = []
        prompts = per_prompt(outcome)
        for position, index in zip(prompts.positions, prompts.indices):
            forced += self.replay(outcome, position, self.buffer.stored(index)[-self.replays :])
        return forced

    def after_rewards(self, outcome: Outcome) -> Decision:
        advantages = _group_advantages(outcome)  # [N]
        forced = outcome.forced if outcome.forced is not None else torch.zeros(len(outcome), dtype=torch.bool)
        extra = ~_first_round(outcome.positions, forced, self._first_counts) & ~forced  # [N]
        train = advantages.abs() > self.min_advantage  # [N]
        train &= ~extra | (advantages.abs() > self.explore_advantage)
        overlong = torch.zeros(len(outcome), dtype=torch.bool)
        if self.filter_overlong and outcome.truncated is not None:
            overlong = outcome.truncated & (advantages > 0)  # [N]
        train &= ~overlong
        stored = self.store(outcome, train & (advantages > self.replay_advantage))
        self._first_counts = {}
        stats = self.replay_stats() | {
            "frac_filtered": float((~train).float().mean()) if len(outcome) else float("nan"),
            "explored_samples": float(extra.sum()),
            "overlong_positive": float(overlong.sum()),
            "stored": float(stored),
        }
        return Decision(train=train, stats=stats)


@SAMPLE_SOURCES.register(
    "ar3po",
    formula="stage s = 1 .. stages−1: prompts with no correct response (r_i ≥ success) get stage_samples more; after "
    "the last stage a prompt still without one gets its reuse newest stored correct responses as forced samples; "
    "every sampled correct response is stored",
    source="[106] AR3PO",
    summary="Adaptive rollout (more samples only for prompts with no correct response yet) and response reuse (an "
    "earlier correct response of a still-unsolved prompt joins its group, restoring a non-zero advantage).",
    off_policy=True,
)
class AR3PO(ReplayRule):
    """[106] AR3PO: adaptive rollout in stages and reuse of earlier correct responses.

    - Adaptive rollout: the first stage is the step's rollout (``algorithm.group_size`` per prompt); after each stage,
      a prompt with no correct response yet (no valid ``r_i ≥ success``) gets ``stage_samples`` more, for up to
      ``stages`` stages (``rounds = stages``). Prompts solved early stop sampling: easy prompts cost one stage.
    - Response reuse: after the last stage, a prompt still without a correct response gets its ``reuse`` newest
      stored correct responses (from earlier steps) as forced samples with their behaviour log-probs, so that its
      all-failed group has a non-zero advantage. Every sampled (not forced) correct response is stored
      (``per_prompt`` newest per prompt, ``capacity`` in all).

    Reading chosen: the abstract gives neither the stage sizes nor the buffer's form; ``stages``, ``stage_samples``,
    ``reuse``, ``per_prompt`` and ``capacity`` are genalign's choices. A response is correct when its weighted reward
    reaches ``success`` (1 for exact-match rewards).

    Args:
        stages: sampling stages per step (>= 1; 1 = reuse only).
        stage_samples: samples added per unsolved prompt at each later stage (>= 1).
        success: the reward of a correct response.
        reuse: stored correct responses added to a still-unsolved prompt (>= 1).
        per_prompt, capacity: the buffer's bounds.
    """

    def __init__(
        self, *, stages: int = 3, stage_samples: int = 8, success: float = 1.0, reuse: int = 1, per_prompt: int = 4,
        capacity: int = 16384,
    ) -> None:  # fmt: skip
        check_count("stages", stages)
        check_count("stage_samples", stage_samples)
        check_count("reuse", reuse)
        super().__init__(per_prompt=per_prompt, capacity=capacity)
        self.rounds, self.stage_samples, self.success, self.reuse = stages, stage_samples, float(success), reuse

    def unsolved(self, outcome: Outcome) -> list[tuple[int, int]]:
        """``(position, data-row index)`` of the prompts with a valid reward but no sampled correct response."""
        correct = outcome.rewards >= self.success  # [N] (False for NaN)
        if outcome.forced is not None:
            correct &= ~outcome.forced
        prompts = per_prompt(outcome)
        solved = set(outcome.positions[correct].tolist())
        return [
            (position, index)
            for position, index, valid in zip(prompts.positions, prompts.indices, prompts.valid)
            if valid > 0 and position not in solved
        ]

    def more_samples(self, outcome: Outcome) -> dict[int, int]:
        return {position: self.stage_samples for position, _ in self.unsolved(outcome)}

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        forced: list[Forced] = []
        for position, index in self.unsolved(outcome):
            forced += self.replay(outcome, position, self.buffer.stored(index)[-self.reuse :])
        return forced

    def after_rewards(self, outcome: Outcome) -> Decision:
        unsolved = len(self.unsolved(outcome))
        prompts = len(per_prompt(outcome).positions)
        stored = self.store(outcome, outcome.rewards >= self.success)
        stats = self.replay_stats() | {
            "frac_unsolved": unsolved / prompts if prompts else float("nan"),
            "stored": float(stored),
        }
        return Decision(stats=stats)
