"""Mixed-policy samples ([134] SOUP): a sample whose prefix comes from a historical policy and whose continuation is
sampled by the current one, so off-policy influence stays confined to the prefix of one sample.

Every sampled completion of a prompt is stored with its behaviour log-probs (the replay buffer of
:mod:`genalign.experimental.sampling.replay_buffer`, keyed by the prompt's data row). When the stream brings the
prompt back, ``mixed`` stored completions are cut after a random fraction of their tokens and continued by the current
policy (a forced continuation, :class:`~genalign.sampling.base.Forced` with ``continues``); the mixed samples join
the prompt's group. Their prefix tokens keep the historical policy's log-probs as behaviour log-probs and the
continuation the current sampler's, so the off-policy clip [323] (``algorithm.clip: off_policy``, required) weighs
every token by its own ratio ``πθ/π_behaviour``: the historical policy's on the prefix, the current one's after it.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from genalign.experimental.sampling.guidance import check_arg
from genalign.experimental.sampling.replay_buffer import ReplayRule, check_count, replay_generator, select_replays
from genalign.experimental.sampling.tokens import cut_generator
from genalign.sampling.base import SAMPLE_SOURCES, Decision, Forced, Outcome, per_prompt


def prefix_length(length: int, fraction: float) -> int:
    """Tokens of a ``length``-token completion kept as the prefix: ``round(fraction · length)`` within ``[1, length −
    1]`` (at least one historical token, at least one token left to continue)."""
    return min(max(round(fraction * length), 1), length - 1)


@SAMPLE_SOURCES.register(
    "mixed_prefix",
    formula="for a revisited prompt x, each of `mixed` stored completions y (sampled by an earlier policy μ): f ~ "
    "U[min_fraction, max_fraction], k = round(f·|y|) ∈ [1, |y| − 1]; o = y_{≤k} ⊕ c, c ~ πθ_old(·|x, y_{≤k}); ratio "
    "per token πθ/μ on y_{≤k}, πθ/πθ_old on c (off-policy clip)",
    source="[134] SOUP",
    summary="Single-sample mix-policy: a prefix of an earlier policy's completion of the prompt, continued by the "
    "current policy, joins the group; token-level ratios keep the off-policy part confined to the prefix.",
    off_policy=True,
)
class MixedPrefix(ReplayRule):
    """[134] SOUP: samples whose prefix is a historical policy's and whose continuation is on-policy.

    After the rollout, a prompt with stored completions gets ``mixed`` of them (``strategy``: the newest, or uniformly
    at random), each cut after ``k = round(f·L)`` of its ``L`` tokens (``f`` uniform in ``[min_fraction,
    max_fraction]``, drawn by a generator of the step, the prompt and the pick) and continued by the current policy;
    their rewards are computed like any sample's and the group's advantages cover on-policy and mixed samples
    together. The step's sampled completions are stored after the retrieval (``per_prompt`` newest per prompt,
    ``capacity`` in all), so a prefix is at least one step old.

    Reading chosen: the abstract says the prefix is "sampled from historical policies"; genalign takes prefixes of the
    completions those policies sampled for the same prompt (a replay buffer, so no old weights are kept), with the cut
    drawn uniformly over a fraction range; ``mixed``, the range and the buffer bounds are genalign's choices.

    Args:
        mixed: mixed samples added per revisited prompt (>= 1).
        min_fraction, max_fraction: the range of the prefix's share of the stored completion, in (0, 1).
        strategy: ``recent`` or ``random`` stored completions.
        per_prompt, capacity: the buffer's bounds.
    """

    def __init__(
        self, *, mixed: int = 2, min_fraction: float = 0.2, max_fraction: float = 0.8,
        strategy: Literal["recent", "random"] = "recent", per_prompt: int = 4, capacity: int = 4096,
    ) -> None:  # fmt: skip
        check_count("mixed", mixed)
        check_arg("max_fraction", 0.0 < min_fraction <= max_fraction < 1.0, max_fraction,
                  f"must be >= min_fraction = {min_fraction!r}, both in (0, 1)")  # fmt: skip
        check_arg("strategy", strategy in ("recent", "random"), strategy, "must be 'recent' or 'random'")
        super().__init__(per_prompt=per_prompt, capacity=capacity)
        self.mixed, self.min_fraction, self.max_fraction, self.strategy = mixed, min_fraction, max_fraction, strategy
        self._fractions: list[float] = []  # this step's prefix shares (reset after the rewards)

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        forced: list[Forced] = []
        prompts = per_prompt(outcome)
        for position, index in zip(prompts.positions, prompts.indices):
            stored = [s for s in self.buffer.stored(index) if s.tokens.shape[0] >= 2]
            picks = select_replays(stored, self.mixed, self.strategy, replay_generator(outcome.step, index))
            for pick, sample in enumerate(picks):
                draw = float(
                    torch.rand((), generator=cut_generator(outcome.step, index, salt=pick), dtype=torch.float64)
                )
                fraction = self.min_fraction + (self.max_fraction - self.min_fraction) * draw
                k = prefix_length(sample.tokens.shape[0], fraction)
                self._staleness.append(outcome.step - sample.step)
                self._fractions.append(k / sample.tokens.shape[0])
                forced.append(Forced(position, sample.tokens[:k].clone(), sample.behaviour_logp[:k].clone(),
                                     kind="mixed", continues=True))  # fmt: skip
        return forced

    def after_rewards(self, outcome: Outcome) -> Decision:
        self.store(outcome, torch.ones(len(outcome), dtype=torch.bool))
        fractions, self._fractions = self._fractions, []
        return Decision(stats=self.replay_stats() | {
            "prefix_fraction_mean": sum(fractions) / len(fractions) if fractions else math.nan,
        })  # fmt: skip
