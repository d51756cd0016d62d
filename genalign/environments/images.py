"""Image tools for VLM episodes: :func:`crop_box` (crop a box of an image and zoom it), the ``crop_image`` tool
(:func:`crop_image_tool`), which crops the episode's current image, and the ``image_zoom`` environment
(:class:`ImageZoom`), which offers that tool over the row's image, may show the model a zoomed view itself
(``reviews``) before it gives its final answer, and may check that answer (``answer_column``).

Boxes are ``[x0, y0, x1, y1]`` (left, top, right, bottom) in one of three coordinate systems: ``"pixels"`` of the
image as the environment holds it, ``"relative"`` (0 to 1) or ``"thousandths"`` (0 to 1000, the Qwen2-VL
convention). A box is clipped to the image; an empty or inverted box is an error for the model. The crop is resized
by ``zoom`` (1 to ``max_zoom``) and then shrunk, keeping its aspect, to at most ``max_pixels`` pixels.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from genalign.environments.base import Environment, register_environment
from genalign.environments.tasks.common import final_answer
from genalign.environments.tools import Tool
from genalign.environments.types import ModelTurn, Observation, StepResult

Coordinates = Literal["pixels", "relative", "thousandths"]
_SCALE = {"pixels": None, "relative": 1.0, "thousandths": 1000.0}
_ANSWER_TAGS = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def tagged_or_marked_answer(text: str) -> str | None:
    """The content of the last ``<answer>...</answer>`` of ``text`` (stripped), else the text after its last
    ``Answer:`` marker (:func:`~genalign.environments.tasks.common.final_answer`), else None."""
    tags = _ANSWER_TAGS.findall(text)
    return tags[-1].strip() if tags else final_answer(text)


def crop_box(
    image: Any,
    box: list[float],
    *,
    zoom: float = 2.0,
    coordinates: Coordinates = "pixels",
    max_zoom: float = 4.0,
    max_pixels: int = 1024 * 1024,
) -> tuple[Any, tuple[int, int, int, int]]:
    """The crop of ``image`` (PIL) at ``box``, zoomed, and the box in pixels after clipping.

    Raises:
        ValueError: a box that is not 4 numbers, is empty after clipping, or a zoom out of range (messages for the
            model).
    """
    from PIL import Image

    if coordinates not in _SCALE:
        raise ValueError(f"coordinates={coordinates!r} is not valid; use 'pixels', 'relative' or 'thousandths'.")
    if len(box) != 4 or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in box):
        raise ValueError(f"box must be 4 numbers [x0, y0, x1, y1], got {box!r}.")
    if not 1.0 <= zoom <= max_zoom:
        raise ValueError(f"zoom must be between 1 and {max_zoom:g}, got {zoom!r}.")
    width, height = image.size
    scale = _SCALE[coordinates]
    if scale is not None:
        box = [box[0] / scale * width, box[1] / scale * height, box[2] / scale * width, box[3] / scale * height]
    x0, y0 = max(0, round(box[0])), max(0, round(box[1]))
    x1, y1 = min(width, round(box[2])), min(height, round(box[3]))
    if x1 - x0 < 1 or y1 - y0 < 1:
        raise ValueError(
            f"the box {list(box)!r} is empty inside the {width}x{height} image; give [x0, y0, x1, y1] with x0 < x1 and "
            f"y0 < y1 ({coordinates} coordinates)."
        )
    crop = image.crop((x0, y0, x1, y1))
    out_w, out_h = (x1 - x0) * zoom, (y1 - y0) * zoom
    shrink = min(1.0, (max_pixels / (out_w * out_h)) ** 0.5)
    size = (max(1, round(out_w * shrink)), max(1, round(out_h * shrink)))
    if size != crop.size:
        crop = crop.resize(size, Image.Resampling.BICUBIC)
    return crop, (x0, y0, x1, y1)


def crop_image_tool(
    current_image: Callable[[], Any],
    *,
    coordinates: Coordinates = "pixels",
    max_zoom: float = 4.0,
    max_pixels: int = 1024 * 1024,
) -> Tool:
    """The ``crop_image`` tool over the image ``current_image()`` returns (the episode's current image).

    The tool's answer is the crop as an image observation, with a line of text saying which pixels it shows.
    """
    unit = {"pixels": "pixels", "relative": "fractions 0-1", "thousandths": "thousandths 0-1000"}[coordinates]

    def crop_image(box: list[float], zoom: float = 2.0) -> Observation:
        """Crop a box of the image and zoom in on it.

        Args:
            box: [x0, y0, x1, y1], the left, top, right and bottom edges.
            zoom: how much to enlarge the crop, from 1 to 4.
        """
        image = current_image()
        if image is None:
            raise ValueError("this episode has no image to crop.")
        crop, (x0, y0, x1, y1) = crop_box(
            image, box, zoom=zoom, coordinates=coordinates, max_zoom=max_zoom, max_pixels=max_pixels
        )
        return Observation(text=f"Crop of pixels ({x0}, {y0})-({x1}, {y1}), shown at {crop.size[0]}x{crop.size[1]}.",
                           images=(crop,))  # fmt: skip

    crop_image.__doc__ = crop_image.__doc__.replace("edges.", f"edges, in {unit}.").replace(
        "to 4.", f"to {max_zoom:g}."
    )
    return Tool.from_function(crop_image, parallel=True)


@register_environment("image_zoom", summary="VLM episodes with a crop_image tool over the row's image (zoom in on a box); "
                     "optionally the environment shows a zoomed view itself before the final answer", source="genalign")  # fmt: skip
class ImageZoom(Environment):
    """The row's image is the episode's current image; the model may call ``crop_image`` on it. The episode ends
    when a turn calls no tool, unless ``reviews`` are left: then the environment answers that turn itself with the
    crop of ``review_box`` zoomed by ``review_zoom`` (:func:`crop_box`, what ``crop_image`` runs) and ``review_text``,
    as a user message, and the model answers again. Without ``answer_column`` the reward is left to the run's reward
    functions (this environment owns none); with it, the environment owns it: 1.0 when the answer of the episode's
    last turn (:func:`tagged_or_marked_answer`) equals the row's ``answer_column`` as text (stripped), else 0.0, so
    only an answer given after every review counts.

    Args:
        image_column: the row column with the image (a PIL image, a list of them: the first is used, or a file path).
        coordinates, max_zoom, max_pixels: as for :func:`crop_image_tool`.
        reviews: turns without a tool call that the environment answers with a zoomed view (0: none, the episode
            ends at the first such turn).
        review_box: the box of the review's crop, in ``coordinates`` (None: the whole image).
        review_zoom: the review crop's zoom, from 1 to ``max_zoom``.
        review_text: the text shown after the review's crop; ``{column}`` fields are filled from the row
            (e.g. ``"Look again. {prompt}"``).
        answer_column: the row column with the expected answer (None: no reward owned).
        tools, tool_limits: as for :class:`~genalign.environments.Environment`.
    """

    def __init__(
        self,
        *,
        image_column: str = "image",
        coordinates: Coordinates = "pixels",
        max_zoom: float = 4.0,
        max_pixels: int = 1024 * 1024,
        reviews: int = 0,
        review_box: list[float] | None = None,
        review_zoom: float = 1.0,
        review_text: str = "Here is a closer look. Check your answer.",
        answer_column: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if coordinates not in _SCALE:
            raise ValueError(f"image_zoom: coordinates={coordinates!r} is not valid; use 'pixels', 'relative' or "
                             "'thousandths'.")  # fmt: skip
        if isinstance(reviews, bool) or not isinstance(reviews, int) or reviews < 0:
            raise ValueError(f"image_zoom: reviews={reviews!r} is not valid; use a number of turns >= 0 (e.g. 1).")
        if review_box is not None and (
            len(review_box) != 4 or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in review_box)
        ):
            raise ValueError(f"image_zoom: review_box={review_box!r} is not valid; use 4 numbers [x0, y0, x1, y1] in "
                             f"{coordinates} coordinates, or null for the whole image.")  # fmt: skip
        if not 1.0 <= review_zoom <= max_zoom:
            raise ValueError(f"image_zoom: review_zoom={review_zoom!r} is not valid; use 1 to max_zoom={max_zoom:g}.")
        self.image_column = image_column
        self.coordinates, self.max_zoom, self.max_pixels = coordinates, max_zoom, max_pixels
        self.reviews, self.review_box, self.review_zoom = reviews, review_box, review_zoom
        self.review_text, self.answer_column = review_text, answer_column
        self.image: Any = None
        self.expected: str | None = None
        self.last_text = ""
        crop = crop_image_tool(lambda: self.image, coordinates=coordinates, max_zoom=max_zoom, max_pixels=max_pixels)
        self.extra_tools.append(crop)

    def reset(self, **row: Any) -> None:
        if self.image_column not in row:
            raise KeyError(f"image_zoom: the row has no {self.image_column!r} column; set image_column. "
                           f"Columns: {sorted(row)}.")  # fmt: skip
        image = row[self.image_column]
        if isinstance(image, (list, tuple)):
            image = image[0] if image else None
        if isinstance(image, str):
            from PIL import Image

            with Image.open(image) as opened:
                image = opened.convert("RGB")
        self.image = image
        self.reviews_left = self.reviews
        if self.answer_column is not None:
            if row.get(self.answer_column) is None:
                raise KeyError(f"image_zoom: the row has no {self.answer_column!r} value; set answer_column to the "
                               f"column of the expected answer. Columns: {sorted(row)}.")  # fmt: skip
            self.expected = str(row[self.answer_column]).strip()
        try:
            self.review_message = self.review_text.format_map(row)
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(f"image_zoom: review_text={self.review_text!r} cannot be filled from the row ({err!r}); "
                             f"its {{fields}} must be row columns: {sorted(row)}.") from None  # fmt: skip
        return None

    def step(self, turn: ModelTurn) -> StepResult:
        result = super().step(turn)
        self.last_text = result.record.content
        if not result.done or self.reviews_left == 0 or self.image is None:
            return result
        self.reviews_left -= 1
        width, height = self.image.size
        box = self.review_box if self.review_box is not None else [0, 0, width, height]
        coordinates = self.coordinates if self.review_box is not None else "pixels"
        crop, _ = crop_box(self.image, box, zoom=self.review_zoom, coordinates=coordinates, max_zoom=self.max_zoom,
                           max_pixels=self.max_pixels)  # fmt: skip
        return result.replace(done=False, observation=Observation(text=self.review_message, images=(crop,)))

    def reward(self) -> float | None:
        if self.expected is None:
            return None
        return float(tagged_or_marked_answer(self.last_text) == self.expected)
