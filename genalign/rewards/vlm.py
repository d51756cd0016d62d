"""Verifiable rewards for vision-language tasks in the style of R1-V and VLM-R1 (neither has an abstract in
shared/seeds/abstracts.md, so no abstract number is cited).

- ``answer_accuracy``: the ``<answer>...</answer>`` part of the completion against the ``answer`` column, compared
  exactly (after whitespace normalisation, optionally case-folded) or mathematically (string, exact rational, then
  symbolic with sympy: :func:`genalign.rewards.math_answers.equivalence.math_answers_equal`). The format reward of these recipes is
  :func:`genalign.rewards.text.format_regex`, whose default pattern is ``<think>...</think><answer>...</answer>``.
- ``box_iou``: intersection over union of the predicted box and the ``box`` column, after rescaling the prediction to
  the original image (see below); optionally thresholded to 0/1.
- ``count_accuracy``: 1 when the predicted count equals the ``count`` column (``require_answer_tags=True``: only a
  count inside ``<answer>...</answer>`` counts).

**Boxes.** A box is four numbers ``x0, y0, x1, y1`` (top-left and bottom-right corners, origin at the top-left of the
image). Accepted spellings: ``[x0, y0, x1, y1]``, ``(x0, y0, x1, y1)``, JSON such as ``{"bbox_2d": [x0, y0, x1, y1]}``
(any bracketed group of four numbers) and Qwen2-VL's ``(x0,y0),(x1,y1)``. The first box inside ``<answer>`` (or in the
whole completion when there are no tags) is used. The ``box`` column is in pixels of the *original* image; the
prediction is in the frame named by ``box_frame``:

- ``"input_pixels"`` (Qwen2.5-VL): pixels of the image as the model saw it, mapped back with the ``image_sizes`` and
  ``image_input_sizes`` columns that :class:`genalign.policies.vlm.VLMPolicy` adds to every rollout row;
- ``"normalized_1000"`` (Qwen2-VL): coordinates in ``0..1000``, mapped with ``image_sizes``;
- ``"original_pixels"``: already in pixels of the original image.

**Unparsable outputs.** A completion without a parsable box (or count), or with a degenerate box (``x1 <= x0`` or
``y1 <= y0``), gets reward 0.0 -- never an exception -- and is counted. The reward objects keep running totals
(``num_scored``, ``num_unparsable``) and :meth:`pop_metrics` returns ``{"unparsable_frac": ...}`` for the batches since
the last call, for the trainer's metrics.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any, Literal

from genalign.rewards.answers import extract_answer
from genalign.rewards.base import register_reward
from genalign.rewards.inputs import AnswerColumn, answer_text, completion_text
from genalign.rewards.math_answers.equivalence import math_answers_equal
from genalign.rewards.text import normalize_text

BoxFrame = Literal["input_pixels", "normalized_1000", "original_pixels"]
Box = tuple[float, float, float, float]

_NUM = r"\s*(-?\d+(?:\.\d+)?)\s*"
_BRACKETED_BOX = re.compile(rf"[\[\(]{_NUM},{_NUM},{_NUM},{_NUM}[\]\)]")
_CORNER_PAIR_BOX = re.compile(rf"\({_NUM},{_NUM}\)\s*,?\s*\({_NUM},{_NUM}\)")
_NUMBER_WORDS = {
    w: i for i, w in enumerate(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"])
}


def answer_part(text: str) -> str:
    """The content of the last ``<answer>...</answer>`` of ``text``, or the whole text when there are no tags."""
    tagged = extract_answer(text, answer_format="answer_tags")
    return text if tagged is None else tagged


def parse_box(text: str) -> Box | None:
    """The first box written in ``text`` (see the module docstring for spellings), or None; degenerate boxes -> None."""
    candidates = []
    for pattern in (_BRACKETED_BOX, _CORNER_PAIR_BOX):
        match = pattern.search(text)
        if match is not None:
            candidates.append(match)
    if not candidates:
        return None
    first = min(candidates, key=lambda m: m.start())
    x0, y0, x1, y1 = (float(v) for v in first.groups())
    if x1 <= x0 or y1 <= y0:
        return None
    return (x0, y0, x1, y1)


def parse_count(text: str) -> int | None:
    """The count written in ``text``: a non-negative integer or a number word (``"zero"`` .. ``"ten"``), or None."""
    match = re.fullmatch(r"\s*(\d+)\s*\.?\s*", text)
    if match is not None:
        return int(match.group(1))
    word = text.strip().rstrip(".").lower()
    if word in _NUMBER_WORDS:
        return _NUMBER_WORDS[word]
    numbers = re.findall(r"\d+", text)
    return int(numbers[-1]) if len(numbers) == 1 else None


def box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """Intersection over union of two ``x0, y0, x1, y1`` boxes (0 when either has no area)."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    area_a = max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1])
    area_b = max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])
    union = area_a + area_b - inter
    return inter / union if union > 0 else 0.0


def rescale_box(box: Sequence[float], from_size: Sequence[float], to_size: Sequence[float]) -> Box:
    """Map ``box`` from an image of ``from_size`` ``(width, height)`` to one of ``to_size``."""
    sx, sy = to_size[0] / from_size[0], to_size[1] / from_size[1]
    return (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)


class _CountedReward:
    """Running totals of scored and unparsable completions, reported by :meth:`pop_metrics`."""

    def __init__(self) -> None:
        self.num_scored = 0
        self.num_unparsable = 0
        self._since_pop = [0, 0]  # scored, unparsable

    def _count(self, unparsable: bool) -> None:
        self.num_scored += 1
        self.num_unparsable += int(unparsable)
        self._since_pop[0] += 1
        self._since_pop[1] += int(unparsable)

    def pop_metrics(self) -> dict[str, float]:
        """``{"unparsable_frac", "num_unparsable"}`` over the completions scored since the previous call."""
        scored, unparsable = self._since_pop
        self._since_pop = [0, 0]
        return {"unparsable_frac": unparsable / scored if scored else 0.0, "num_unparsable": float(unparsable)}


def _column(name: str, values: Sequence[Any] | None, count: int, reward: str) -> Sequence[Any]:
    if values is None:
        raise ValueError(f"reward {reward!r} needs the dataset column {name!r}; add it to the rows")
    if len(values) != count:
        raise ValueError(f"reward {reward!r}: column {name!r} has {len(values)} values for {count} completions")
    return values


@register_reward("box_iou", source="VLM-R1 REC accuracy (no seed abstract)")
class BoxIoU(_CountedReward):
    """IoU of the predicted box with the ``box`` column, the prediction mapped to the original image first.

    Args:
        box_frame: coordinate frame of the model's boxes (module docstring).
        threshold: when set, the reward is 1.0 for IoU >= threshold and 0.0 otherwise; else the IoU itself.
        image_index: which image of the row the box refers to (rows with several images).
    """

    def __init__(self, *, box_frame: BoxFrame = "input_pixels", threshold: float | None = None, image_index: int = 0):
        super().__init__()
        if box_frame not in ("input_pixels", "normalized_1000", "original_pixels"):
            raise ValueError(
                f"box_iou: box_frame={box_frame!r} must be input_pixels, normalized_1000 or original_pixels"
            )
        if threshold is not None and not 0.0 < threshold <= 1.0:
            raise ValueError(f"box_iou: threshold={threshold!r} must be in (0, 1] or None")
        self.box_frame = box_frame
        self.threshold = threshold
        self.image_index = image_index

    def _to_original(self, box: Box, sizes: Any, input_sizes: Any) -> Box:
        if self.box_frame == "original_pixels":
            return box
        if sizes is None or (self.box_frame == "input_pixels" and input_sizes is None):
            raise ValueError(
                f"box_iou with box_frame={self.box_frame!r} needs the image_sizes"
                f"{' and image_input_sizes' if self.box_frame == 'input_pixels' else ''} columns (added by the vlm "
                "policy); set box_frame='original_pixels' when boxes are already in original pixels"
            )
        original = sizes[self.image_index]
        source = (1000.0, 1000.0) if self.box_frame == "normalized_1000" else input_sizes[self.image_index]
        return rescale_box(box, source, original)

    def __call__(
        self,
        prompts: Sequence[str],
        completions: Sequence[Any],
        box: Sequence[Any] | None = None,
        image_sizes: Sequence[Any] | None = None,
        image_input_sizes: Sequence[Any] | None = None,
        **columns: Any,
    ) -> list[float | None]:
        count = len(completions)
        box = _column("box", box, count, "box_iou")
        rewards: list[float | None] = []
        for i, (completion, target) in enumerate(zip(completions, box, strict=True)):
            if target is None:
                rewards.append(None)
                continue
            predicted = parse_box(answer_part(completion_text(completion)))
            self._count(predicted is None)
            if predicted is None:
                rewards.append(0.0)
                continue
            sizes = image_sizes[i] if image_sizes is not None else None
            input_sizes = image_input_sizes[i] if image_input_sizes is not None else None
            iou = box_iou(self._to_original(predicted, sizes, input_sizes), target)
            rewards.append(iou if self.threshold is None else float(iou >= self.threshold))
        return rewards


@register_reward("count_accuracy", source="R1-V counting (no seed abstract)")
class CountAccuracy(_CountedReward):
    """1.0 when the count in the completion's answer equals the ``count`` column, 0.0 otherwise or when unparsable.

    Args:
        require_answer_tags: read the count only from ``<answer>...</answer>``; a completion without the tags is
            unparsable (reward 0). Without it a bare ``"2"`` also scores, which lets RL drop the reasoning format
            (reward hacking seen on the shapes demo); with it the accuracy reward enforces the format by itself.
    """

    def __init__(self, *, require_answer_tags: bool = False) -> None:
        super().__init__()
        if not isinstance(require_answer_tags, bool):
            raise ValueError(f"count_accuracy: require_answer_tags={require_answer_tags!r} must be true or false")
        self.require_answer_tags = require_answer_tags

    def _answer(self, text: str) -> str | None:
        if self.require_answer_tags:
            return extract_answer(text, answer_format="answer_tags")
        return answer_part(text)

    def __call__(
        self, prompts: Sequence[str], completions: Sequence[Any], count: Sequence[Any] | None = None, **columns: Any
    ) -> list[float | None]:
        count = _column("count", count, len(completions), "count_accuracy")
        rewards: list[float | None] = []
        for completion, target in zip(completions, count, strict=True):
            if target is None:
                rewards.append(None)
                continue
            answer = self._answer(completion_text(completion))
            predicted = None if answer is None else parse_count(answer)
            self._count(predicted is None)
            rewards.append(float(predicted is not None and predicted == int(target)))
        return rewards


def _answer_scores(
    completions: Sequence[Any], references: Sequence[str | None], *, mode: str, lowercase: bool, timeout_s: float
) -> list[float | None]:
    if mode not in ("exact", "symbolic"):
        raise ValueError(f"answer_accuracy: mode={mode!r} must be 'exact' or 'symbolic'")
    norm = functools.partial(normalize_text, lowercase=lowercase)
    rewards: list[float | None] = []
    for completion, reference in zip(completions, references, strict=True):
        if reference is None:
            rewards.append(None)
            continue
        predicted = answer_part(completion_text(completion))
        if mode == "exact":
            rewards.append(float(norm(predicted) == norm(reference)))
        else:
            rewards.append(float(math_answers_equal(predicted, reference, timeout_s=timeout_s)))
    return rewards


@register_reward("answer_accuracy", source="R1-V (no seed abstract)")
class AnswerAccuracy:
    """1.0 where the ``<answer>`` part (or the whole completion without tags) equals ``answer``, else 0.0.

    ``mode="exact"``: equal after whitespace normalisation (and case folding with ``lowercase``), for choices and
    words; ``mode="symbolic"``: :func:`genalign.rewards.math_answers.equivalence.math_answers_equal` (exact string,
    rational, sympy). ``None`` where the reference is null or not an answer (a list, a dict, true/false), counted as
    ``bad_answer`` (:meth:`pop_metrics`) and named once.
    """

    def __init__(
        self, *, mode: Literal["exact", "symbolic"] = "symbolic", lowercase: bool = True, timeout_s: float = 5.0
    ):
        if mode not in ("exact", "symbolic"):
            raise ValueError(f"answer_accuracy: mode={mode!r} must be 'exact' or 'symbolic'")
        self.options = {"mode": mode, "lowercase": lowercase, "timeout_s": timeout_s}
        self.answers = AnswerColumn("answer_accuracy")

    def __call__(
        self, prompts: Sequence[str], completions: Sequence[Any], answer: Sequence[Any] | None = None, **columns: Any
    ) -> list[float | None]:
        return _answer_scores(completions, self.answers.read(answer, len(completions), columns), **self.options)

    def pop_metrics(self) -> dict[str, float]:
        """``bad_answer``: rows since the previous call whose answer was not usable."""
        return self.answers.pop_metrics()


def answer_accuracy(
    prompts: Sequence[str],
    completions: Sequence[Any],
    answer: Sequence[Any] | None = None,
    *,
    mode: Literal["exact", "symbolic"] = "symbolic",
    lowercase: bool = True,
    timeout_s: float = 5.0,
    **columns: Any,
) -> list[float | None]:
    """:class:`AnswerAccuracy` as a plain function (no counters, no warning), for direct calls."""
    references = [answer_text(v) for v in _column("answer", answer, len(completions), "answer_accuracy")]
    return _answer_scores(completions, references, mode=mode, lowercase=lowercase, timeout_s=timeout_s)


__all__ = [
    "AnswerAccuracy",
    "BoxIoU",
    "CountAccuracy",
    "answer_accuracy",
    "answer_part",
    "box_iou",
    "parse_box",
    "parse_count",
    "rescale_box",
]
