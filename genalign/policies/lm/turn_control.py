"""T²PO's rollout-time exploration control for multi-turn rollouts [171]: a token-level thinking intervention
(``policy.multi_turn.thinking_intervention``) and the resampling of turns without progress
(``policy.multi_turn.resample_turns``). Their credit-side counterpart is the rule ``turn_progress_gate``.

Both read declared signals only: the behaviour log-probabilities of the turn's sampled tokens (their surprisal
``u_t = −log π_old(o_t)``, the uncertainty proxy the engines report for every sampled token) and the environment's
answers; neither reads what the model writes.

**Thinking intervention.** "T²PO monitors uncertainty dynamics and triggers a thinking intervention once the marginal
uncertainty change falls below a threshold." With window ``w``, the marginal change at position ``p`` is
``Δ_p = |mean(u[p−w:p]) − mean(u[p−2w:p−w])|``; at the first ``p >= 2w`` (before the turn's last token) with
``Δ_p < τ`` the turn is cut after its first ``p`` tokens, the intervention text is appended as context (the
environment-token convention: action mask 0, no log-prob, never trained) and the model samples the rest of its turn
after it, within the turn's remaining token budget. At most one intervention per turn. The tokens sampled after ``p``
in the first call are discarded: they were sampled after the point where the intervention applies, and the kept
tokens have exactly the log-probs of a call that would have stopped at ``p`` (same context, same draws).

**Turn resampling.** "T²PO identifies interactions with negligible exploration progress and dynamically resamples
such turns." A turn that does not end the episode makes no progress when (each test switchable):

* its answer repeats an answer the environment already gave in this trajectory (the same text), or
* the change of the turn's mean surprisal from the previous accepted turn, ``|ū_k − ū_{k−1}|``, is below
  ``min_uncertainty_change`` (the turn-level reading of the same signal).

Such a turn is taken back: its tokens are removed, the environment is rewound to before its step
(:func:`~genalign.environments.branching.rewind`) and the turn is sampled again from the same context, at most
``max_resamples`` times per trajectory (counted: ``rollout/turns_resampled``). The kept tokens' behaviour log-probs
stay exact: every kept token was sampled once from the context it is scored with.

Reading chosen: the abstract does not give the uncertainty measure, the intervention text or the progress test; the
surprisal of the sampled tokens is used (the rollout has it for free), the intervention text is configured, and a
repeated answer is the declared "no progress" signal of the environment.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from genalign.environments.branching import rewind


@dataclass
class ThinkingIntervention:
    """``policy.multi_turn.thinking_intervention`` (T²PO [171], token level)."""

    text: str | None = field(
        default=None,
        metadata={"help": "Text inserted (as context, never trained) where the turn's uncertainty stops changing; "
                  "null = off. E.g. '\\nWait, let me think about what I know so far.\\n'."},
    )  # fmt: skip
    window: int = field(default=8, metadata={"help": "Tokens per window of the mean surprisal (w >= 1)."})
    threshold: float = field(
        default=0.05, metadata={"help": "Intervene where |mean u over the last w − over the w before| < this (nats)."}
    )

    @property
    def enabled(self) -> bool:
        return self.text is not None

    def validate(self) -> None:
        if not self.enabled:
            return
        if not self.text:
            raise ValueError("policy.multi_turn.thinking_intervention.text is empty; give the text or null (off).")
        if self.window < 1:
            raise ValueError(f"policy.multi_turn.thinking_intervention.window={self.window} must be >= 1 (e.g. 8).")
        if not self.threshold > 0:
            raise ValueError(
                f"policy.multi_turn.thinking_intervention.threshold={self.threshold} must be > 0 (e.g. 0.05)."
            )


@dataclass
class TurnResampling:
    """``policy.multi_turn.resample_turns`` (T²PO [171], turn level)."""

    max_resamples: int = field(
        default=0, metadata={"help": "Turns resampled at most per trajectory for lack of progress; 0 = off."}
    )
    repeated_answer: bool = field(
        default=True, metadata={"help": "A turn whose answer repeats an earlier answer of the trajectory: no progress."}
    )
    min_uncertainty_change: float | None = field(
        default=None,
        metadata={"help": "A turn whose mean surprisal moves less than this (nats) from the previous turn's: no "
                  "progress; null = not tested."},
    )  # fmt: skip

    @property
    def enabled(self) -> bool:
        return self.max_resamples > 0

    def validate(self) -> None:
        if self.max_resamples < 0:
            raise ValueError(
                f"policy.multi_turn.resample_turns.max_resamples={self.max_resamples} must be >= 0 (0 = off)."
            )
        if self.min_uncertainty_change is not None and not self.min_uncertainty_change > 0:
            raise ValueError(
                "policy.multi_turn.resample_turns.min_uncertainty_change="
                f"{self.min_uncertainty_change} must be > 0 or null."
            )
        if self.enabled and not self.repeated_answer and self.min_uncertainty_change is None:
            raise ValueError(
                "policy.multi_turn.resample_turns.max_resamples > 0 with no progress test: set repeated_answer=true "
                "or min_uncertainty_change."
            )


def mean_surprisal(logp: list[float]) -> float:
    """``ū = −mean(logp)`` of a turn's sampled tokens (0 for an empty turn)."""
    return -sum(logp) / len(logp) if logp else 0.0


def intervention_point(logp: list[float], window: int, threshold: float) -> int | None:
    """The first position ``p`` with ``2w <= p < len(logp)`` where ``|mean(u[p−w:p]) − mean(u[p−2w:p−w])| <
    threshold`` (``u = −logp``, the module docstring), or None."""
    for p in range(2 * window, len(logp)):
        recent = mean_surprisal(logp[p - window : p])
        before = mean_surprisal(logp[p - 2 * window : p - window])
        if abs(recent - before) < threshold:
            return p
    return None


def without_progress(
    options: TurnResampling, answer: str, earlier_answers: list[str], surprisal: float, previous: float | None
) -> bool:
    """Whether a turn made no progress (module docstring): its ``answer`` text is one of ``earlier_answers``, or its
    mean ``surprisal`` moved less than ``min_uncertainty_change`` from the ``previous`` accepted turn's (None: it is
    the first)."""
    if options.repeated_answer and answer in earlier_answers:
        return True
    change = options.min_uncertainty_change
    return change is not None and previous is not None and abs(surprisal - previous) < change


def intervene(policy: Any, family: Any, active: list[Any], params: Any, counts: Counter) -> None:
    """The thinking intervention (module docstring) on the turn each ``active`` trajectory has just sampled: a turn
    whose uncertainty stops changing is cut there, the intervention text follows as context, and the rest of the turn
    is sampled by ``family`` (its ``generate``) with ``params`` (the rollout's sampling parameters)."""
    options = policy.config.multi_turn.thinking_intervention
    text_ids = policy.chat_renderer.encode(options.text)
    cut = []
    for trajectory in active:
        point = intervention_point(trajectory.turn_logp(), options.window, options.threshold)
        if point is None:
            continue
        trajectory.truncate(trajectory.turn_start + point)
        trajectory.extend(text_ids, None, trajectory.turn)
        cut.append((trajectory, params.max_new_tokens - point))
        counts["thinking_interventions"] += 1
    if not cut:
        return
    rest = replace(params, max_new_tokens=max(budget for _, budget in cut))
    for (trajectory, budget), (ids, logp, hit) in zip(cut, family.generate([t for t, _ in cut], rest, counts)):
        keep = min(len(ids), budget)
        trajectory.extend(ids[:keep], logp[:keep], trajectory.turn)
        trajectory.turn_cut = hit or keep < len(ids)


def take_back(policy: Any, t: Any, saved: dict[str, Any] | None, counts: Counter) -> bool:
    """Take back the turn being sampled (no progress): the environment rewound to before its step, its tokens
    removed; False when the environment cannot be rewound (counted; the turn is then accepted and the trajectory
    ends after it)."""
    try:
        t.episode = rewind(policy.environments, t.source, t.episode, saved, t.model_turns)
    except Exception as err:  # any failure of environment code: counted, never stops the run
        counts["environment_errors/rewind"] += 1
        policy.environment_failures.append(f"rewind: {type(err).__name__}: {err}")
        t.failed = True
        t.end(truncated=True)
        return False
    t.truncate(t.turn_start)
    t.resamples += 1
    counts["turns_resampled"] += 1
    return True


__all__ = [
    "ThinkingIntervention",
    "TurnResampling",
    "intervene",
    "intervention_point",
    "mean_surprisal",
    "take_back",
    "without_progress",
]
