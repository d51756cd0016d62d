"""Video question answering rows from the synthetic shapes world (:mod:`genalign.data.shapes`), for VLMs with video.

Each row holds a short clip of shapes scenes in the ``video`` column (``{"frames": [F, H, W, 3] uint8, "fps": ...}``,
a form :mod:`genalign.policies.vlm.video` reads), with a verifiable question about time:

- **frames**: ``"In how many frames does the red circle appear?"`` -> ``"2"``: the asked shape is drawn in a random
  subset of the frames (its size uniform in ``0..num_frames``), at a random place in each; every frame also holds one
  distractor of another label. Columns ``count`` (for :func:`~genalign.rewards.vlm.CountAccuracy`) and ``answer``.
- **motion**: ``"Which way does the red circle move?"`` -> ``"right"``: the asked shape crosses the canvas in a
  straight line, the same step each frame, in one of ``left``, ``right``, ``up``, ``down``, next to a still distractor.
  Columns ``direction`` and ``answer`` (for ``answer_accuracy``).

Image-to-video rows (``"shapes_i2v"``, :func:`shapes_i2v_rows`) take the first frame of a motion clip, the moving shape
alone, as the source image (``image`` column) with the instruction ``"The red circle moves right."`` and its
``direction`` column, which the ``shape_motion`` reward checks in the generated video.

The frames are given at the clip's own rate (``fps``; ``policy.video_fps`` resamples them). The split of a
problem is a stable hash (:func:`genalign.data.procedural.split_of`) of its question and every frame's scene, so the
train and eval splits are disjoint for every pair of seeds. Configs reach the rows as the procedural task
``"shapes_video"`` (``data.train.source: procedural:shapes_video``, ``args``: the keyword arguments of
:func:`shapes_video_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from genalign.data.procedural import PROCEDURAL_TASKS, Split, split_of
from genalign.data.shapes import KINDS, PALETTE, Scene, Shape, render
from genalign.data.vlm_tasks import scene_key

VideoKind = Literal["frames", "motion"]
VIDEO_KINDS: tuple[str, ...] = ("frames", "motion")
#: direction -> unit step ``(dx, dy)`` in image coordinates (y grows downwards)
DIRECTIONS: dict[str, tuple[int, int]] = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}


def frames_question(color: str, kind: str) -> str:
    """``"In how many frames does the red circle appear?"``."""
    return f"In how many frames does the {color} {kind} appear?"


def motion_question(color: str, kind: str) -> str:
    """``"Which way does the red circle move?"``."""
    return f"Which way does the {color} {kind} move?"


def _box(x: int, y: int, side: int) -> tuple[int, int, int, int]:
    return (x, y, x + side, y + side)


def _apart(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether boxes ``a`` and ``b`` (``x0, y0, x1, y1``) are at least one pixel apart."""
    return a[0] >= b[2] + 1 or b[0] >= a[2] + 1 or a[1] >= b[3] + 1 or b[1] >= a[3] + 1


def _free_box(rng: np.random.Generator, canvas: int, side: int, avoid: Sequence[Sequence[int]]) -> tuple[int, ...]:
    for _ in range(200):
        box = _box(int(rng.integers(0, canvas - side + 1)), int(rng.integers(0, canvas - side + 1)), side)
        if all(_apart(box, other) for other in avoid):
            return box
    raise RuntimeError(f"shapes_video: no free place for a {side}px shape on a {canvas}px canvas; raise canvas")


def _frames_clip(rng, target: Shape, distractor: Shape, num_frames: int, canvas: int) -> tuple[list[Scene], int]:
    """Scenes where ``target`` appears in a random subset of the frames; the number of those frames."""
    count = int(rng.integers(0, num_frames + 1))
    shown = set(rng.choice(num_frames, size=count, replace=False).tolist())
    side = target.box[2] - target.box[0]
    scenes = []
    for frame in range(num_frames):
        other = Shape(distractor.kind, distractor.color, _free_box(rng, canvas, side, []))
        shapes = [other]
        if frame in shown:
            shapes.append(Shape(target.kind, target.color, _free_box(rng, canvas, side, [other.box])))
        scenes.append(Scene(size=canvas, shapes=tuple(shapes)))
    return scenes, count


def _motion_clip(rng, target: Shape, distractor: Shape, num_frames: int, canvas: int) -> tuple[list[Scene], str]:
    """Scenes where ``target`` moves in a straight line (one step per frame) past a still distractor."""
    direction = list(DIRECTIONS)[int(rng.integers(len(DIRECTIONS)))]
    dx, dy = DIRECTIONS[direction]
    side = target.box[2] - target.box[0]
    travel = canvas - side  # the whole path fits the canvas
    step = travel // max(num_frames - 1, 1)
    start_along = 0 if dx + dy > 0 else travel  # moving right / down starts at 0, left / up at the far side
    across = int(rng.integers(0, canvas - side + 1))
    path = []
    for frame in range(num_frames):
        along = start_along + (dx + dy) * step * frame
        path.append(_box(along, across, side) if dx else _box(across, along, side))
    still = Shape(distractor.kind, distractor.color, _free_box(rng, canvas, side, path))
    scenes = [Scene(size=canvas, shapes=(still, Shape(target.kind, target.color, box))) for box in path]
    return scenes, direction


@PROCEDURAL_TASKS.register("shapes_video", source="genalign")
def shapes_video_rows(
    size: int,
    seed: int,
    *,
    split: Split = "train",
    eval_fraction: float = 0.2,
    kinds: Sequence[str] = VIDEO_KINDS,
    num_frames: int = 4,
    fps: float = 2.0,
    canvas: int = 48,
    image_size: int = 48,
    colors: Sequence[str] = tuple(PALETTE),
    shape_kinds: Sequence[str] = KINDS,
    side: float = 0.25,
    keep_scenes: bool = False,
) -> list[dict[str, Any]]:
    """``size`` video question rows (module docstring).

    Args:
        size: number of rows.
        seed: seed of the clip and question stream (rows are a pure function of the arguments).
        split: ``"train"`` or ``"eval"`` (disjoint).
        eval_fraction: share of all problems that belongs to the eval split.
        kinds: question kinds drawn uniformly: ``"frames"`` and/or ``"motion"``.
        num_frames: frames per clip (>= 2).
        fps: the clips' frame rate.
        canvas: side of the scene canvas in pixels; ``image_size``: side of the rendered frames.
        colors, shape_kinds: the scene vocabulary (at least two labels: the asked shape and a distractor).
        side: shape side as a fraction of ``canvas``.
        keep_scenes: also return each clip's scenes (``scenes``: one :class:`~genalign.data.shapes.Scene` per frame).

    Returns:
        rows with ``prompt``, ``video`` (``{"frames": [F, H, W, 3] uint8, "fps": fps}``), ``answer`` (str), ``task``,
        ``label`` and
        ``count`` (frames rows) or ``direction`` (motion rows).
    """
    kinds = tuple(kinds)
    colors, shape_kinds = tuple(colors), tuple(shape_kinds)
    labels = [(c, k) for c in colors for k in shape_kinds]
    _check_arguments(size, split, eval_fraction, kinds, num_frames, fps, canvas, image_size, labels, side)
    shape_side = max(2, round(side * canvas))
    rng = np.random.default_rng([seed, 11])
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for _ in range(50 * size + 1000):
        if len(rows) == size:
            return rows
        task = kinds[int(rng.integers(len(kinds)))]
        picks = rng.choice(len(labels), size=2, replace=False)
        (color, kind), (other_color, other_kind) = labels[int(picks[0])], labels[int(picks[1])]
        target, distractor = Shape(kind, color, _box(0, 0, shape_side)), Shape(other_kind, other_color, (0, 0, 0, 0))
        if task == "frames":
            scenes, count = _frames_clip(rng, target, distractor, num_frames, canvas)
            question, answer, columns = frames_question(color, kind), str(count), {"count": count}
        else:
            scenes, direction = _motion_clip(rng, target, distractor, num_frames, canvas)
            question, answer, columns = motion_question(color, kind), direction, {"direction": direction}
        key = f"{question}|" + "|".join(scene_key(scene) for scene in scenes)
        if key in seen or split_of(key, eval_fraction=eval_fraction) != split:
            continue
        seen.add(key)
        video = np.stack([np.asarray(render(scene, size=image_size)) for scene in scenes])  # [F, H, W, 3]
        rows.append({"prompt": question, "video": {"frames": video, "fps": fps}, "answer": answer, "task": task,
                     "label": f"{color} {kind}", **columns, **({"scenes": scenes} if keep_scenes else {})})  # fmt: skip
    raise RuntimeError(f"shapes_video: could not draw {size} distinct {split} problems; widen the vocabulary")


@PROCEDURAL_TASKS.register("shapes_i2v", source="genalign")
def shapes_i2v_rows(
    size: int,
    seed: int,
    *,
    split: Split = "train",
    eval_fraction: float = 0.2,
    num_frames: int = 4,
    canvas: int = 48,
    image_size: int = 48,
    colors: Sequence[str] = tuple(PALETTE),
    shape_kinds: Sequence[str] = KINDS,
    side: float = 0.25,
) -> list[dict[str, Any]]:
    """``size`` image-to-video rows (module docstring): the motion clips of :func:`shapes_video_rows` (same arguments,
    same splits), each reduced to its first frame with the moving shape alone.

    Returns:
        rows with ``prompt`` (``"The red circle moves right."``), ``image`` (PIL RGB, ``image_size`` square: the
        shape at the start of its path), ``direction`` and ``label``.
    """
    clips = shapes_video_rows(size, seed, split=split, eval_fraction=eval_fraction, kinds=("motion",),
                              num_frames=num_frames, canvas=canvas, image_size=image_size, colors=colors,
                              shape_kinds=shape_kinds, side=side, keep_scenes=True)  # fmt: skip
    rows = []
    for clip in clips:
        moving = clip.pop("scenes")[0].shapes[-1]  # the target moves; the first shape is the still distractor
        image = render(Scene(size=canvas, shapes=(moving,)), size=image_size)
        rows.append({"prompt": f"The {clip['label']} moves {clip['direction']}.", "image": image,
                     "direction": clip["direction"], "label": clip["label"]})  # fmt: skip
    return rows


def _check_arguments(
    size: int, split: str, eval_fraction: float, kinds: tuple[str, ...], num_frames: int, fps: float, canvas: int,
    image_size: int, labels: list[tuple[str, str]], side: float,
) -> None:  # fmt: skip
    """Raise ``ValueError`` naming the first argument of :func:`shapes_video_rows` that is out of range."""
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"shapes_video: size={size!r} must be a positive integer")
    if split not in ("train", "eval"):
        raise ValueError(f"shapes_video: split={split!r} must be 'train' or 'eval'")
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"shapes_video: eval_fraction={eval_fraction!r} must be strictly between 0 and 1")
    if not kinds or any(k not in VIDEO_KINDS for k in kinds):
        raise ValueError(f"shapes_video: kinds={kinds!r} must be a non-empty subset of {VIDEO_KINDS}")
    if not isinstance(num_frames, int) or num_frames < 2:
        raise ValueError(f"shapes_video: num_frames={num_frames!r} must be an integer >= 2")
    if fps <= 0:
        raise ValueError(f"shapes_video: fps={fps!r} must be > 0")
    if image_size < canvas:
        raise ValueError(f"shapes_video: image_size={image_size} must be >= canvas={canvas}")
    if len(labels) < 2:
        raise ValueError(f"shapes_video: colors x shape_kinds give {len(labels)} label(s); need 2 (asked + distractor)")
    if not 0.0 < side <= 0.5:
        raise ValueError(f"shapes_video: side={side!r} must be in (0, 0.5] (a fraction of the canvas)")


__all__ = ["DIRECTIONS", "VIDEO_KINDS", "frames_question", "motion_question", "shapes_video_rows"]
