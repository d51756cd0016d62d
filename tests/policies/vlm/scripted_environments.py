"""Deterministic image environments for the VLM multi-turn tests (importable by path from configs:
``tests.policies.vlm.scripted_environments:ScriptedCrop``).

The tiny shapes VLM cannot write tool-call JSON, so :class:`ScriptedCrop` reads its calls to the ``crop_image`` tool
from a script (one text per turn) instead of the model's turn: the tool, its parsing and running are those of the
``image_zoom`` environment, only the text is chosen by the test.
"""

from __future__ import annotations

from typing import Any

from genalign.environments import ImageZoom, ModelTurn, Observation, StepResult, crop_box


def crop_call(box: list[int], zoom: float) -> str:
    return f'<tool_call>{{"name": "crop_image", "arguments": {{"box": {box}, "zoom": {zoom}}}}}</tool_call>'


#: turn 0: the top-left quarter of a 48x48 image zoomed 2x (a 48x48 crop: 16 image tokens); turn 1: the left half,
#: not zoomed (24x48: 8 image tokens); turn 2: no call, the episode ends
CROP_SCRIPT = [crop_call([0, 0, 24, 24], 2), crop_call([0, 0, 24, 48], 1), "done"]


class ScriptedCrop(ImageZoom):
    """``image_zoom`` whose turn ``k`` runs the tool calls of ``script[k]``; done after a turn without a call."""

    def __init__(self, *, script: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.script = list(script if script is not None else CROP_SCRIPT)

    def step(self, turn: ModelTurn) -> StepResult:
        record = self.call_tools(self.script[min(turn.index, len(self.script) - 1)])
        return StepResult(record=record, done=not record.calls)


class FirstLook(ImageZoom):
    """``reset`` shows the top-left quarter of the row's image (24x24 of a 48x48 image) with a line of text."""

    def reset(self, **row: Any) -> Observation:
        super().reset(**row)
        crop, _ = crop_box(self.image, [0, 0, 24, 24], zoom=1.0)
        return Observation(text="A closer look.", images=(crop,))


class UnreadableImage(ImageZoom):
    """Answers every turn with an image that is a file path which does not exist."""

    def step(self, turn: ModelTurn) -> StepResult:
        return StepResult(observation=Observation(text="look", images=("/nonexistent/crop.png",)))
