"""Tool-use counts of a multi-turn transcript, as rewards: ``tool_calls`` and ``tool_errors``.

A multi-turn rollout gives each reward the whole transcript after the prompt: the model's turns (tool-call blocks
included) and the environment's rendered messages (:mod:`genalign.policies.lm.multi_turn`). These two rewards count
what happened in it, as rewards (``reward/<name>`` per step, ``eval/reward/<name>`` at every held-out evaluation),
next to the rollout's own counters (``rollout/tools/*`` and ``eval/rollout/tools/*``: calls by outcome, as the
environment parsed and ran them). Give them ``weight: 0`` to log without optimising them.

- ``tool_calls``: the number of ``<tool_call>`` blocks the model opened (malformed ones included);
- ``tool_errors``: the number of error observations, the lines that start with ``Error (<kind>):``
  (``genalign.environments.execution`` writes one per failed call; ``kinds`` restricts the count).

Reading chosen: both read the transcript's text, so they count what the chat template rendered. A tool that itself
answers with a line ``Error (tool_error): ...`` is counted as an error; a TRL-style environment's ``{'error': ...}``
answers are not.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from genalign.rewards.base import register_reward
from genalign.rewards.inputs import completion_text

#: Deliberate copies of ``genalign.environments.parsing.OPEN_TAG`` and ``genalign.environments.types.ERROR_KINDS``
#: (the environments package imports this one, so this one imports no environment module);
#: ``tests/rewards/test_tool_use.py`` checks that they agree.
OPEN_TAG = "<tool_call>"
ERROR_KINDS = ("bad_json", "unknown_tool", "bad_arguments", "tool_error", "timeout", "too_large", "too_many_calls")
_ERROR_LINE = re.compile(r"^Error \((\w+)\):", re.MULTILINE)


@register_reward("tool_calls", source="rule")
def tool_calls(prompts: Sequence[str], completions: Sequence[Any], **columns: Any) -> list[float]:
    """The number of tool-call blocks (``<tool_call>``) in each transcript."""
    return [float(completion_text(c).count(OPEN_TAG)) for c in completions]


@register_reward("tool_errors", source="rule")
class ToolErrors:
    """The number of error observations (``Error (<kind>):`` lines) in each transcript.

    Args:
        kinds: count only these error kinds (``bad_json``, ``tool_error``, ...); None counts every kind.
    """

    def __init__(self, *, kinds: Sequence[str] | None = None) -> None:
        self.kinds = set(ERROR_KINDS if kinds is None else kinds)
        unknown = sorted(self.kinds - set(ERROR_KINDS))
        if unknown:
            raise ValueError(f"tool_errors: kinds={unknown} are not error kinds; use some of {list(ERROR_KINDS)}.")

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Any) -> list[float]:
        return [float(sum(k in self.kinds for k in _ERROR_LINE.findall(completion_text(c)))) for c in completions]


__all__ = ["ToolErrors", "tool_calls"]
