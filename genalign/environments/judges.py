"""Segment judges: the role of each model turn of an episode, for role-typed segment credit (TRIAGE [8], the credit
rule ``triage``).

TRIAGE's "structured judge classifies each segment as decisive progress, useful exploration, no-progress
infrastructure, or regression" (:data:`ROLES`). Here a segment is one model turn: the turn structure is declared by
the rollout (the tokens the model sampled between two environment answers), never read from text the model writes,
so a policy cannot create, split or merge segments by writing role markers or fake tool answers.

A judge is a callable registered in :data:`SEGMENT_JUDGES` (configured by ``policy.multi_turn.segment_judge``, a
name or ``{name, **args}``, like rewards): ``judge(segments, counts) -> roles``, one :data:`ROLES` index per segment
of one episode; a judge that falls back on part of an episode (an LLM judge's unparsable reply) adds to ``counts``
(a ``Counter``, reported with the rollout's counters). The default, ``tool_outcomes``, is rule-based and needs no model: it reads what the *environment* recorded
of each turn (the tool calls it ran and their outcomes, the per-turn reward, whether the episode ended there), which
the model cannot write; the turn's text is given to judges that read it (an LLM judge), never to this one.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from genalign.environments.types import TurnRecord
from genalign.registry import Registry

#: the roles of TRIAGE [8], by index (the value of the ``turn_roles`` structure)
ROLES: tuple[str, ...] = ("decisive", "exploration", "infrastructure", "regression")
DECISIVE, EXPLORATION, INFRASTRUCTURE, REGRESSION = range(len(ROLES))


@dataclass(frozen=True)
class TurnSegment:
    """One model turn of an episode, as the rollout recorded it.

    Args:
        index: the turn's number, from 0.
        text: the model's turn, decoded (what the model wrote: never read by a rule-based judge).
        record: the environment's record of the turn's tool calls and their results.
        answer: the text of the environment's answer (tool results and feedback), "" when it gave none.
        reward: the environment's reward of the turn, or None.
        ended: the episode ended at this turn (the environment said done).
    """

    index: int
    text: str
    record: TurnRecord = field(default_factory=TurnRecord)
    answer: str = ""
    reward: float | None = None
    ended: bool = False


#: ``judge(segments, counts=None) -> roles`` (module docstring)
SegmentJudge = Callable[..., list[int]]

#: name -> factory ``(**args) -> SegmentJudge``
SEGMENT_JUDGES: Registry[Callable[..., SegmentJudge]] = Registry("segment judge")


def call_key(record: TurnRecord) -> str:
    """The turn's tool calls as one comparable string (name and arguments of each call, in order)."""
    return json.dumps([[c.name, dict(c.arguments)] for c in record.calls], sort_keys=True, default=str)


@SEGMENT_JUDGES.register(
    "tool_outcomes",
    source="[8] TRIAGE (rule-based reading of the structured judge)",
    summary="Roles from what the environment recorded: a reward gain or the episode's end is decisive, a new call "
    "that ran is exploration, a repeated call or answer or a turn without a call is infrastructure, a failed call or a "
    "reward drop is regression.",
)
def tool_outcomes(*, end_is_decisive: bool = True) -> SegmentJudge:
    """The rule-based judge (module docstring). Per turn, first match wins:

    1. **regression**: a tool call failed (any error kind of :data:`~genalign.environments.ERROR_KINDS`), or the
       turn's reward is below the previous turn's reward;
    2. **decisive**: the turn's reward is above every earlier turn's reward (0 before the first), or
       (``end_is_decisive``) the episode ended at this turn without a failure;
    3. **infrastructure**: the turn called no tool, or repeated an earlier turn's calls (same names and arguments),
       or got an answer identical to an earlier one;
    4. **exploration**: otherwise (new calls that ran and a new answer).

    Reading chosen: TRIAGE's judge is an LLM; this default reads only the environment's record, so it needs no
    download and cannot be forged by the policy's text (an LLM judge registered here receives the text).
    """

    def judge(segments: Sequence[TurnSegment], counts: Counter | None = None) -> list[int]:
        roles, best, previous = [], 0.0, None
        calls_seen: set[str] = set()
        answers_seen: set[str] = set()
        for segment in segments:
            record, reward = segment.record, segment.reward
            scored = reward is not None and math.isfinite(reward)
            failed = any(result.error is not None for result in record.results)
            key = call_key(record)
            if failed or (scored and previous is not None and reward < previous):
                role = REGRESSION
            elif (scored and reward > best) or (end_is_decisive and segment.ended):
                role = DECISIVE
            elif not record.calls or key in calls_seen or (segment.answer and segment.answer in answers_seen):
                role = INFRASTRUCTURE
            else:
                role = EXPLORATION
            roles.append(role)
            if record.calls:
                calls_seen.add(key)
            if segment.answer:
                answers_seen.add(segment.answer)
            if scored:
                best, previous = max(best, reward), reward
        return roles

    return judge


def segment_judge(spec: Any) -> SegmentJudge:
    """The judge of a config entry: a registered name or ``{name, **args}``.

    Raises:
        UnknownOptionError: an unknown name (with a did-you-mean hint); ValueError: a bad entry or argument.
    """
    from genalign.registry import Option

    option = Option.parse(spec, "policy.multi_turn.segment_judge")
    factory = SEGMENT_JUDGES.get(option.name)
    try:
        return factory(**option.args)
    except TypeError as err:
        raise ValueError(f"policy.multi_turn.segment_judge {option.name!r}: {err}") from None


__all__ = [
    "DECISIVE",
    "EXPLORATION",
    "INFRASTRUCTURE",
    "REGRESSION",
    "ROLES",
    "SEGMENT_JUDGES",
    "SegmentJudge",
    "TurnSegment",
    "call_key",
    "segment_judge",
    "tool_outcomes",
]
