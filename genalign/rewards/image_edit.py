"""Rewards of image editing on the shapes world (rows of :mod:`genalign.data.shapes_edit`): did the edit happen, and
did the rest of the source stay as it was. Both read the source image from the row like every reward reads a row's
columns (the column ``image``, or ``source_column``), as a path, a PIL image or a ``{"bytes", "path"}`` dict
(:func:`genalign.data.images.open_image`), and the structured ``edit`` column.

- ``shapes_edit``: the verifier. The shapes :func:`genalign.data.shapes.detect` finds in the output must be the edit's
  target: each target colour found exactly once (with its kind when ``match_kind``), each shape that keeps its place
  within ``max_shift`` of it, and no other shape. Returning the source unchanged fails (the recoloured shape keeps its
  old colour, the added one is missing, the removed one is still there); so does a blank image (every target holds a
  shape). With ``partial_credit`` the score is the edit's own criterion (the new colour in place, the added shape
  present, the removed colour absent) times the fraction of the other criteria met, so neither forgery earns credit.
- ``source_consistency``: ``1 - mean |output - source| / 255`` over the pixels the edit must leave alone: outside the
  edited shape's box (recolour, remove) grown by ``margin`` pixels, or, for an addition (whose place is free), inside
  the kept shapes' boxes grown by ``margin``. A regulariser, not a verifier: the unchanged source scores 1 here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from PIL import Image

from genalign.data import shapes as shapes_world
from genalign.data.images import open_image
from genalign.rewards.base import register_reward
from genalign.rewards.image import as_rgb_image, require_column


def _edit_of(value: Any, *, reward: str, index: int) -> Mapping[str, Any]:
    if not isinstance(value, Mapping) or not {"kind", "target", "changed", "canvas"} <= set(value):
        raise ValueError(
            f"reward {reward!r}: the 'edit' of sample {index} is {value!r:.120}; expected the dict written by "
            "genalign.data.shapes_edit (kind, target, changed, region, canvas)"
        )
    return value


def _scaled_centre(box: Sequence[int], scale: float) -> tuple[float, float]:
    return ((box[0] + box[2]) / 2.0 * scale, (box[1] + box[3]) / 2.0 * scale)


def edit_criteria(
    found: list[shapes_world.Shape], edit: Mapping[str, Any], *, image_size: int, match_kind: bool, max_shift: float
) -> tuple[bool, list[bool]]:
    """``(edit_done, kept)``: the edit's own criterion, and one criterion per other target shape plus "no other shape".

    A target shape is met when exactly one found shape has its colour (and kind, with ``match_kind``) and, if it keeps
    its place (``placed``), its centre lies within ``max_shift * image_size`` pixels of the target's. The edit's own
    criterion: the changed shape met (recolour, add), or no shape of the removed colour left (remove).
    """
    scale = image_size / edit["canvas"]

    def met(shape: Mapping[str, Any]) -> bool:
        same = [s for s in found if s.color == shape["color"] and (not match_kind or s.kind == shape["kind"])]
        if len(same) != 1:
            return False
        if not shape.get("placed", True):
            return True
        (x, y), (tx, ty) = same[0].center, _scaled_centre(shape["box"], scale)
        return ((x - tx) ** 2 + (y - ty) ** 2) ** 0.5 <= max_shift * image_size

    changed = edit["changed"]
    if edit["kind"] == "remove":
        done = not any(s.color == changed["color"] for s in found)
        others = list(edit["target"])
    else:
        done = met(changed)
        others = [s for s in edit["target"] if s["color"] != changed["color"]]
    kept = [met(s) for s in others] + [len(found) == len(edit["target"])]
    return done, kept


@register_reward("shapes_edit", source="genalign, shapes world")
class ShapesEdit:
    """The editing verifier of the shapes world (module docstring): 1 when the output shows the edit's target scene.

    Args:
        partial_credit: the edit's own criterion times the fraction of the other criteria, instead of all-or-nothing.
        match_kind: shapes must keep their kind (circle / square / triangle); False checks colours and places only.
        max_shift: how far (a fraction of the image side) a kept shape's centre may move.
        max_distance, min_area: passed to :func:`~genalign.data.shapes.detect`.
    """

    def __init__(
        self,
        *,
        partial_credit: bool = False,
        match_kind: bool = True,
        max_shift: float = 0.15,
        max_distance: float = 120.0,
        min_area: float = 0.012,
    ) -> None:
        if not 0 < max_shift <= 1:
            raise ValueError(f"shapes_edit: max_shift={max_shift} must be in (0, 1] (a fraction of the image side)")
        self.partial_credit, self.match_kind, self.max_shift = partial_credit, match_kind, max_shift
        self.max_distance, self.min_area = max_distance, min_area

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Sequence[Any]) -> list[float]:
        edits = require_column("shapes_edit", "edit", columns, len(completions))
        scores = []
        for index, (image, value) in enumerate(zip(completions, edits)):
            edit = _edit_of(value, reward="shapes_edit", index=index)
            rgb = as_rgb_image(image, reward="shapes_edit", index=index)
            found = shapes_world.detect(rgb, max_distance=self.max_distance, min_area=self.min_area)
            done, kept = edit_criteria(found, edit, image_size=rgb.width, match_kind=self.match_kind,
                                       max_shift=self.max_shift)  # fmt: skip
            if self.partial_credit:
                scores.append(float(done) * sum(kept) / len(kept))
            else:
                scores.append(float(done and all(kept)))
        return scores


def preserved_mask(edit: Mapping[str, Any], size: int, *, margin: int) -> np.ndarray:
    """``[size, size]`` bool: the pixels an edit must leave as they were (module docstring), in an image of ``size``."""
    scale = size / edit["canvas"]

    def box_mask(box: Sequence[int]) -> np.ndarray:
        mask = np.zeros((size, size), dtype=bool)
        x0, y0, x1, y1 = (round(v * scale) for v in box)
        mask[max(0, y0 - margin) : min(size, y1 + margin), max(0, x0 - margin) : min(size, x1 + margin)] = True
        return mask

    if edit.get("region") is not None:
        return ~box_mask(edit["region"])
    kept = np.zeros((size, size), dtype=bool)
    for shape in edit["target"]:
        if shape.get("placed", True):
            kept |= box_mask(shape["box"])
    return kept


@register_reward("source_consistency", source="genalign")
class SourceConsistency:
    """Pixel similarity to the source image where the edit must not change it (module docstring), in ``[0, 1]``.

    Args:
        source_column: the row column of the source image (the flow policy's ``policy.source_column``).
        margin: pixels added around the edited region (anti-aliasing and small placement errors).
    """

    def __init__(self, *, source_column: str = "image", margin: int = 1) -> None:
        if margin < 0:
            raise ValueError(f"source_consistency: margin={margin} must be >= 0")
        self.source_column, self.margin = source_column, margin

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Sequence[Any]) -> list[float]:
        sources = require_column("source_consistency", self.source_column, columns, len(completions))
        edits = require_column("source_consistency", "edit", columns, len(completions))
        scores = []
        for index, (image, source, value) in enumerate(zip(completions, sources, edits)):
            edit = _edit_of(value, reward="source_consistency", index=index)
            output = np.asarray(as_rgb_image(image, reward="source_consistency", index=index), dtype=np.float32)
            size = output.shape[1]
            if output.shape[0] != size:
                raise ValueError(f"reward 'source_consistency': completion {index} is not square ({output.shape[:2]})")
            original = open_image(source, row_index=index, column=self.source_column)
            if original.size != (size, size):
                original = original.resize((size, size), Image.Resampling.NEAREST)
            difference = np.abs(output - np.asarray(original, dtype=np.float32)).mean(-1)  # [H, W]
            mask = preserved_mask(edit, size, margin=self.margin)
            scores.append(1.0 - float(difference[mask].mean()) / 255.0 if mask.any() else 1.0)
        return scores
