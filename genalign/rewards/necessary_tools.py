"""``necessary_tool_use``: whether a multi-turn transcript used a tool exactly when the row says the question needs
one, the "necessary tool use" half of TAPO's tool rewards [9] (the other half, evidence-consistent crops, is the
``evidence_zoom`` environment's per-turn reward)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from genalign.rewards.base import register_reward
from genalign.rewards.inputs import check_column
from genalign.rewards.tool_use import ToolErrors, tool_calls


@register_reward("necessary_tool_use", source="[9] TAPO")
class NecessaryToolUse:
    """1.0 when the transcript made a successful tool call and the row's ``needed_column`` is true, or made none and
    it is false; ``unneeded_value`` for successful calls the question did not need; 0.0 for a needed call never made
    successfully. ``None`` for a row whose need is unknown (``None``).

    A call counts as successful when it is not answered by an error observation: successful calls = ``tool_calls``
    − ``tool_errors`` (the environment writes one error line per failed call), so a malformed or invented
    ``<tool_call>`` block, or text that imitates a tool result, earns nothing.

    Reading chosen: TAPO rewards necessary and evidence-consistent tool use without the formula; the need is a data
    column (e.g. whether the evidence is too small to read without zooming) and the values are ours.

    Args:
        needed_column: the row column saying whether the question needs a tool (bool).
        unneeded_value: the reward of a successful call the question did not need, in ``[0, 1]``.
    """

    def __init__(self, *, needed_column: str = "needs_tool", unneeded_value: float = 0.0) -> None:
        if not 0.0 <= unneeded_value <= 1.0:
            raise ValueError(f"necessary_tool_use: unneeded_value={unneeded_value!r} must be in [0, 1]")
        self.needed_column, self.unneeded_value = needed_column, unneeded_value
        self.errors = ToolErrors()

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        needed = check_column(self.needed_column, columns.get(self.needed_column), len(completions),
                              "necessary_tool_use")  # fmt: skip
        calls = tool_calls(prompts, completions)
        failed = self.errors(prompts, completions)
        scores: list[float | None] = []
        for need, made, errors in zip(needed, calls, failed, strict=True):
            used = made - errors > 0
            if need is None:
                scores.append(None)
            elif bool(need):
                scores.append(1.0 if used else 0.0)
            else:
                scores.append(self.unneeded_value if used else 1.0)
        return scores


__all__ = ["NecessaryToolUse"]
