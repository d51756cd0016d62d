"""``evidence_zoom``: the ``image_zoom`` environment whose ``crop_image`` calls earn a per-turn reward for containing
the row's evidence region, the dense tool-level reward of TAPO [9].

A turn's reward (``StepResult.reward``, recorded in the rollout's ``turn_rewards``) is the mean over the turn's
``crop_image`` calls of each call's reward: the share of the evidence box the crop covers (``graded``) or whether that
share reaches ``min_coverage``; a crop more than ``max_area_ratio`` times the evidence box's area earns 0 (the whole
image contains every evidence: without this limit a policy would learn to crop everything), a failed call (bad box,
bad arguments) earns 0, and a turn without a crop call has no reward. The reward depends only on the question's evidence and the tool's input and output, never on the
chain-of-thought tokens. Credit rules that read per-turn rewards (``turn_reward_to_go``, ``at_grpo``) turn it into
per-turn advantages next to the outcome reward.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from genalign.environments.base import register_environment
from genalign.environments.images import Coordinates, ImageZoom, crop_box
from genalign.environments.types import StepResult, ToolCall, ToolResult

#: the name of the image tool whose calls are rewarded
CROP_TOOL = "crop_image"


def box_coverage(crop: Sequence[float], evidence: Sequence[float]) -> float:
    """The share of the area of ``evidence`` inside ``crop`` (both ``[x0, y0, x1, y1]`` in one coordinate system);
    0 for an empty evidence box."""
    width = min(crop[2], evidence[2]) - max(crop[0], evidence[0])
    height = min(crop[3], evidence[3]) - max(crop[1], evidence[1])
    area = (evidence[2] - evidence[0]) * (evidence[3] - evidence[1])
    return max(0.0, width) * max(0.0, height) / area if area > 0 else 0.0


def _area(box: Sequence[float]) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def read_box(value: Any, column: str) -> list[float]:
    """A box from a row: 4 numbers, as a list or its JSON text; a ``ValueError`` naming ``column`` otherwise."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = None
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 4
        or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value)
    ):
        raise ValueError(f"evidence_zoom: the row's {column!r} is {value!r}; give the evidence box as 4 numbers "
                         "[x0, y0, x1, y1].")  # fmt: skip
    return [float(v) for v in value]


@register_environment(
    "evidence_zoom",
    summary="image_zoom whose crop_image calls earn a per-turn reward when the crop contains the row's evidence box "
    "(dense tool rewards)",
    source="[9] TAPO",
)
class EvidenceZoom(ImageZoom):
    """``image_zoom`` plus a per-turn reward on its ``crop_image`` calls (module docstring).

    Reading chosen: TAPO defines step-wise rewards on visual tool inputs and outputs (does the crop contain the queried
    evidence) without the formula; here a call earns the share of the evidence box its crop covers, thresholded at
    ``min_coverage`` unless ``graded``, and a turn earns the mean over its crop calls. The evidence box is the row's
    ``evidence_column`` (the grounding rows of ``procedural:shapes_vqa`` carry one as ``box``), in
    ``evidence_coordinates`` (default: the tool's ``coordinates``).

    Args:
        evidence_column: the row column with the evidence box ``[x0, y0, x1, y1]``.
        evidence_coordinates: its coordinate system (``pixels``, ``relative``, ``thousandths``), or None (the tool's).
        min_coverage: the share of the evidence a crop must cover to earn 1, in ``(0, 1]``.
        max_area_ratio: the largest crop area, as a multiple of the evidence box's area (>= 1), that earns a reward.
        graded: earn the covered share itself instead of 0/1.
        **kwargs: the arguments of :class:`~genalign.environments.images.ImageZoom`.
    """

    def __init__(
        self,
        *,
        evidence_column: str = "box",
        evidence_coordinates: Coordinates | None = None,
        min_coverage: float = 0.5,
        max_area_ratio: float = 4.0,
        graded: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if evidence_coordinates not in (None, "pixels", "relative", "thousandths"):
            raise ValueError(f"evidence_zoom: evidence_coordinates={evidence_coordinates!r} is not valid; use 'pixels', "
                             "'relative', 'thousandths' or null (the tool's coordinates).")  # fmt: skip
        if not 0.0 < min_coverage <= 1.0:
            raise ValueError(f"evidence_zoom: min_coverage={min_coverage!r} must be in (0, 1].")
        if not max_area_ratio >= 1.0:
            raise ValueError(f"evidence_zoom: max_area_ratio={max_area_ratio!r} must be >= 1 (e.g. 4: a crop up to four "
                             "times the evidence box's area).")  # fmt: skip
        self.max_area_ratio = max_area_ratio
        self.evidence_column, self.min_coverage, self.graded = evidence_column, min_coverage, graded
        self.evidence_coordinates = evidence_coordinates or self.coordinates
        self.evidence: list[float] | None = None

    def reset(self, **row: Any) -> None:
        super().reset(**row)
        if row.get(self.evidence_column) is None:
            raise KeyError(f"evidence_zoom: the row has no {self.evidence_column!r} value; set evidence_column to the "
                           f"column of the evidence box. Columns: {sorted(row)}.")  # fmt: skip
        box = read_box(row[self.evidence_column], self.evidence_column)
        self.evidence = list(self.pixel_box(box, self.evidence_coordinates))
        return None

    def step(self, turn: Any) -> StepResult:
        return self.rewarded(super().step(turn))

    def rewarded(self, result: StepResult) -> StepResult:
        """``result`` with the reward of its turn's crop calls (unchanged when the turn made none)."""
        rewards = [self.call_reward(call, outcome)
                   for call, outcome in zip(result.record.calls, result.record.results, strict=True)
                   if call.name == CROP_TOOL]  # fmt: skip
        return result.replace(reward=sum(rewards) / len(rewards)) if rewards else result

    def call_reward(self, call: ToolCall, outcome: ToolResult) -> float:
        """One crop call's reward: 0 when it failed, else from the evidence share its box covers."""
        if not outcome.ok or self.evidence is None or self.image is None:
            return 0.0
        crop = self.pixel_box(call.arguments["box"], self.coordinates)
        if _area(crop) > self.max_area_ratio * _area(self.evidence):  # no localisation: the evidence is a speck in it
            return 0.0
        coverage = box_coverage(crop, self.evidence)
        return coverage if self.graded else float(coverage >= self.min_coverage)

    def pixel_box(self, box: Sequence[float], coordinates: Coordinates) -> tuple[float, ...]:
        """``box`` in pixels of the episode's image, clipped to it: the box :func:`crop_box` crops."""
        _, pixels = crop_box(self.image, list(box), zoom=1.0, coordinates=coordinates, max_zoom=self.max_zoom,
                             max_pixels=self.max_pixels)  # fmt: skip
        return tuple(float(v) for v in pixels)
