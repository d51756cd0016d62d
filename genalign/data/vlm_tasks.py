"""Visual question answering rows from the synthetic shapes world (:mod:`genalign.data.shapes`).

Two question kinds, both with verifiable answers:

- **count**: ``"How many red circles are there?"`` -> ``"2"``; answers are uniform in ``0..max_count`` and the scene
  also holds distractors of other colours and kinds, so the answer needs both colour and shape;
- **ground**: ``"Give the box of the blue square."`` -> ``"[x0, y0, x1, y1]"`` in pixels of the image, ``x1``/``y1``
  exclusive, origin at the top-left corner (the asked shape occurs exactly once, among distractors).

Each row holds the rendered image (a ``PIL.Image`` in the ``image`` column), the question as ``prompt``, the ``answer``
string, and the structured columns the VLM rewards read (``count``, or ``box`` plus ``image_size``), so the same rows
serve the accuracy, counting and IoU rewards of :mod:`genalign.rewards.vlm`.

Train / held-out split: a problem's split is a stable hash (:func:`genalign.data.procedural.split_of`) of its question
and the exact scene (every shape's colour, kind and box), so the splits are disjoint for every pair of seeds.

Configs reach the rows as the procedural task ``"shapes_vqa"`` (``data.train.source: procedural:shapes_vqa`` with
``args: {size, seed, split, kinds, colors, ...}``; the keyword arguments of :func:`shapes_vqa_rows`). The demo model
``builtin:shapes-vlm`` was pre-trained on ``kinds: [count]``, ``colors: [red, green, blue]``,
``shape_kinds: [circle, square]`` with the default ``eval_fraction=0.2``: keep those for its held-out split.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

from genalign.data.procedural import PROCEDURAL_TASKS, Split, split_of
from genalign.data.shapes import KINDS, PALETTE, Scene, Shape, render, sample_scene

VQAKind = Literal["count", "ground"]
VQA_KINDS: tuple[str, ...] = ("count", "ground")


def count_question(color: str, kind: str) -> str:
    """``"How many red circles are there?"``."""
    return f"How many {color} {kind}s are there?"


def ground_question(color: str, kind: str) -> str:
    """``"Give the box of the blue square."``."""
    return f"Give the box of the {color} {kind}."


def format_box(box: Sequence[float]) -> str:
    """``"[x0, y0, x1, y1]"`` with integer pixel coordinates."""
    return "[" + ", ".join(str(round(v)) for v in box) + "]"


def scaled_box(box: Sequence[int], scale: float) -> list[int]:
    """``box`` of the scene canvas in pixels of an image rendered ``scale`` times larger (rounded like :func:`render`)."""
    return [round(v * scale) for v in box]


def scene_key(scene: Scene) -> str:
    """A text identifying the exact scene (colours, kinds, boxes), used for the stable split hash."""
    return ";".join(f"{s.color} {s.kind} {list(s.box)}" for s in scene.shapes)


def _overlaps(box: Sequence[int], others: Sequence[Sequence[int]], gap: int) -> bool:
    """Whether ``box`` comes closer than ``gap`` pixels to any box of ``others`` (boxes ``x0, y0, x1, y1``)."""
    return any(
        not (box[0] >= b[2] + gap or b[0] >= box[2] + gap or box[1] >= b[3] + gap or b[1] >= box[3] + gap)
        for b in others
    )


def compose_scene(
    rng: np.random.Generator,
    *,
    target: tuple[str, str],
    count: int,
    num_distractors: int,
    canvas: int,
    colors: tuple[str, ...],
    shape_kinds: tuple[str, ...],
    min_side: float,
    max_side: float,
) -> Scene:
    """A scene with exactly ``count`` shapes of label ``target`` (colour, kind) and up to ``num_distractors`` shapes
    of other labels (fewer when they do not fit).

    The shapes come from :func:`genalign.data.shapes.sample_scene`: the targets from its ``"count"`` template, each
    distractor from its ``"pair"`` template, kept when it does not touch a shape already placed.
    """
    color, kind = target
    sides = {"min_side": min_side, "max_side": max_side}
    shapes: list[Shape] = []
    if count > 0:
        for _ in range(100):
            base = sample_scene(
                rng, size=canvas, template="count", colors=(color,), kinds=(kind,), max_count=count, **sides
            )
            if len(base.shapes) == count:
                shapes = list(base.shapes)
                break
        else:
            raise RuntimeError(f"could not draw {count} {color} {kind}s on a {canvas}px canvas; raise canvas")
    others = [(c, k) for c in colors for k in shape_kinds if (c, k) != target]
    for _ in range(num_distractors if len(others) >= 2 else 0):
        for _ in range(20):
            pair = sample_scene(rng, size=canvas, template="pair", colors=colors, kinds=shape_kinds, **sides)
            extra = next(s for s in pair.shapes if (s.color, s.kind) != target)
            if not _overlaps(extra.box, [s.box for s in shapes], gap=1):
                shapes.append(extra)
                break
    order = rng.permutation(len(shapes))
    return Scene(size=canvas, shapes=tuple(shapes[int(i)] for i in order))


@PROCEDURAL_TASKS.register("shapes_vqa", source="genalign")
def shapes_vqa_rows(
    size: int,
    seed: int,
    *,
    split: Split = "train",
    eval_fraction: float = 0.2,
    kinds: Sequence[str] = VQA_KINDS,
    canvas: int = 48,
    image_size: int = 48,
    colors: Sequence[str] = tuple(PALETTE),
    shape_kinds: Sequence[str] = KINDS,
    max_count: int = 3,
    max_distractors: int = 2,
    min_side: float = 0.2,
    max_side: float = 0.28,
) -> list[dict[str, Any]]:
    """``size`` VQA rows about random shapes scenes.

    Args:
        size: number of rows.
        seed: seed of the scene and question stream (rows are a pure function of the arguments).
        split: ``"train"`` or ``"eval"``; the two are disjoint (see the module docstring).
        eval_fraction: share of all problems that belongs to the eval split.
        kinds: question kinds to draw from, uniformly: ``"count"`` and/or ``"ground"``.
        canvas: side of the scene canvas in pixels.
        image_size: side of the rendered image; boxes are given in its pixels.
        colors, shape_kinds: the scene vocabulary (see :func:`genalign.data.shapes.sample_scene`).
        max_count: counting answers are uniform in ``0..max_count`` (at most 3, the shapes world's limit).
        max_distractors: each scene also holds ``0..max_distractors`` shapes of other labels (uniform).
        min_side, max_side: shape side as a fraction of ``canvas``.

    Returns:
        rows with ``prompt`` (str), ``image`` (PIL RGB), ``answer`` (str), ``task`` (``"count"`` / ``"ground"``),
        ``label`` (``"red circle"``), ``image_size`` (``[width, height]``), and ``count`` (int, counting rows) or
        ``box`` (``[x0, y0, x1, y1]`` in image pixels, grounding rows).
    """
    kinds = tuple(kinds)
    _check_arguments(size, split, eval_fraction, kinds, canvas, image_size, max_count, max_distractors)
    colors, shape_kinds = tuple(colors), tuple(shape_kinds)
    labels = [(c, k) for c in colors for k in shape_kinds]
    scale = image_size / canvas
    compose = functools.partial(
        compose_scene, canvas=canvas, colors=colors, shape_kinds=shape_kinds, min_side=min_side, max_side=max_side
    )
    rng = np.random.default_rng([seed, 7])
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    attempts = 0
    while len(rows) < size:
        attempts += 1
        if attempts > 50 * size + 1000:
            raise RuntimeError(f"shapes_vqa: could not draw {size} distinct {split} problems; widen the vocabulary")
        problem = _draw_problem(rng, kinds, labels, max_count, max_distractors, scale, compose)
        key = f"{problem.question}|{scene_key(problem.scene)}"
        if key in seen or split_of(key, eval_fraction=eval_fraction) != split:
            continue
        seen.add(key)
        rows.append(
            {
                "prompt": problem.question,
                "image": render(problem.scene, size=image_size),
                "answer": problem.answer,
                "task": problem.task,
                "label": problem.label,
                "image_size": [image_size, image_size],
                **problem.columns,
            }
        )
    return rows


def _check_arguments(
    size: int,
    split: str,
    eval_fraction: float,
    kinds: tuple[str, ...],
    canvas: int,
    image_size: int,
    max_count: int,
    max_distractors: int,
) -> None:
    """Raise ``ValueError`` naming the first argument of :func:`shapes_vqa_rows` that is out of range."""
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"shapes_vqa: size={size!r} must be a positive integer")
    if split not in ("train", "eval"):
        raise ValueError(f"shapes_vqa: split={split!r} must be 'train' or 'eval'")
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"shapes_vqa: eval_fraction={eval_fraction!r} must be strictly between 0 and 1")
    if not kinds or any(k not in VQA_KINDS for k in kinds):
        raise ValueError(f"shapes_vqa: kinds={kinds!r} must be a non-empty subset of {VQA_KINDS}")
    if image_size < canvas:
        raise ValueError(f"shapes_vqa: image_size={image_size} must be >= canvas={canvas} (boxes would collapse)")
    if not 1 <= max_count <= 3:
        raise ValueError(f"shapes_vqa: max_count={max_count!r} must be in 1..3")
    if max_distractors < 0:
        raise ValueError(f"shapes_vqa: max_distractors={max_distractors!r} must be >= 0")


class _Problem(NamedTuple):
    """One drawn question: its scene, and what a row holds about it (``columns``: ``count`` or ``box``)."""

    task: str
    label: str
    question: str
    answer: str
    columns: dict[str, Any]
    scene: Scene


def _draw_problem(
    rng: np.random.Generator,
    kinds: tuple[str, ...],
    labels: list[tuple[str, str]],
    max_count: int,
    max_distractors: int,
    scale: float,
    compose: Callable[..., Scene],
) -> _Problem:
    """A random question kind and label, a scene for it (``compose``: :func:`compose_scene` with the vocabulary and
    canvas bound) and its answer; boxes in pixels of an image ``scale`` times the canvas."""
    task = kinds[int(rng.integers(len(kinds)))]
    color, kind = labels[int(rng.integers(len(labels)))]
    count = int(rng.integers(0, max_count + 1)) if task == "count" else 1
    scene = compose(rng, target=(color, kind), count=count, num_distractors=int(rng.integers(0, max_distractors + 1)))
    if task == "count":
        question, answer, columns = count_question(color, kind), str(count), {"count": count}
    else:
        box = scaled_box(next(s.box for s in scene.shapes if (s.color, s.kind) == (color, kind)), scale)
        question, answer, columns = ground_question(color, kind), format_box(box), {"box": box}
    return _Problem(task, f"{color} {kind}", question, answer, columns, scene)


__all__ = [
    "VQA_KINDS",
    "compose_scene",
    "count_question",
    "format_box",
    "ground_question",
    "scaled_box",
    "shapes_vqa_rows",
]
