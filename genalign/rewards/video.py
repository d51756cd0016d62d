"""Procedural video rewards that need no download: they read the frames ``[F, H, W, 3]`` uint8 and the frames per
second (the column ``fps``, declared by the policy that made the videos: :attr:`Rollout.OUTPUT_INFO_KEYS`).

* ``shape_motion``: one object moving steadily at a target speed (in image widths per second, so that the same clip
  shown at another rate earns another score), present and of constant size in every frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from genalign.rewards.base import register_reward
from genalign.video_files import as_video, check_fps

#: the directions a row's ``direction`` column may name, as unit vectors ``(dx, dy)`` in image coordinates (y down)
DIRECTIONS = {"right": (1.0, 0.0), "left": (-1.0, 0.0), "down": (0.0, 1.0), "up": (0.0, -1.0)}


def foreground_masks(video: np.ndarray, *, threshold: float) -> np.ndarray:
    """``[F, H, W]`` bool: pixels of each frame ``[F, H, W, 3]`` farther than ``threshold`` (largest channel
    difference, 0..255) from that frame's background colour, the median of its border pixels."""
    frames = video.astype(np.float32)
    border = np.concatenate(
        [frames[:, 0], frames[:, -1], frames[:, 1:-1, 0], frames[:, 1:-1, -1]], axis=1
    )  # [F, 2W + 2(H - 2), 3]
    background = np.median(border, axis=1)  # [F, 3]
    return np.abs(frames - background[:, None, None, :]).max(axis=-1) > threshold


def centroids(masks: np.ndarray) -> np.ndarray:
    """``[F, 2]`` centre ``(x, y)`` of each mask ``[F, H, W]`` in image widths (x) and heights (y); NaN when empty."""
    _, height, width = masks.shape
    ys, xs = np.mgrid[0:height, 0:width]
    area = masks.sum(axis=(1, 2)).astype(np.float64)  # [F]
    with np.errstate(invalid="ignore", divide="ignore"):
        x = (masks * (xs + 0.5)).sum(axis=(1, 2)) / area / width
        y = (masks * (ys + 0.5)).sum(axis=(1, 2)) / area / height
    return np.stack([x, y], axis=1)


def shape_motion_score(
    video: np.ndarray,
    fps: int,
    *,
    speed: float,
    direction: tuple[float, float] | None,
    min_area: float,
    max_area: float,
    threshold: float,
) -> float:
    """The ``shape_motion`` score of one video ``[F, H, W, 3]`` at ``fps``: the product, each in ``[0, 1]``, of

    * presence ``p``: the fraction of frames whose foreground covers ``[min_area, max_area]`` of the image;
    * constant size ``c = max(0, 1 - std(a) / mean(a))`` over those frames' foreground areas ``a``;
    * straightness ``s = |sum_f d_f| / sum_f |d_f|`` of the centre's steps ``d_f = c_{f+1} - c_f`` between
      consecutive present frames (1 for a straight path, near 0 for jitter);
    * speed ``m = min(v / speed, speed / v)`` of the net velocity ``v = |mean_f d_f| * fps`` (widths per second), or of
      its component along ``direction`` (``m = 0`` when the object moves the other way).

    A static clip (``v = 0``), a blank one (``p = 0``) and noise (no net motion, unstable area) score 0 or near it.
    Fewer than two present frames score 0.
    """
    masks = foreground_masks(video, threshold=threshold)  # [F, H, W]
    areas = masks.mean(axis=(1, 2))  # [F]
    present = (areas >= min_area) & (areas <= max_area)  # [F]
    if present.sum() < 2:
        return 0.0
    presence = float(present.mean())
    kept = areas[present]
    constant = max(0.0, 1.0 - float(kept.std() / kept.mean()))
    centres = centroids(masks)  # [F, 2]
    steps = np.diff(centres[present], axis=0)  # [P - 1, 2], between consecutive present frames
    path = float(np.linalg.norm(steps, axis=1).sum())
    if path == 0.0:
        return 0.0
    net = steps.mean(axis=0)  # [2]
    straight = float(np.linalg.norm(net * len(steps))) / path
    velocity = float(net @ np.asarray(direction)) if direction is not None else float(np.linalg.norm(net))
    velocity *= fps
    moving = 0.0 if velocity <= 0 else min(velocity / speed, speed / velocity)
    return presence * constant * straight * moving


@register_reward("shape_motion", source="procedural video reward (moving-shape world); needs no model")
class ShapeMotion:
    """One object moving steadily at ``speed`` image widths per second (:func:`shape_motion_score`), in ``[0, 1]``.

    Reads the column ``fps`` (frames per second of each video, which the flow policy declares) and, when the batch has
    it, the column ``direction`` (``right``, ``left``, ``up`` or ``down``; null: any direction).

    Args:
        speed: target speed of the object in image widths (or heights, vertically) per second.
        min_area, max_area: the object's share of the image in a frame where it counts as present.
        threshold: largest-channel distance (0..255) from the background colour that makes a pixel foreground.
    """

    def __init__(
        self, *, speed: float = 0.5, min_area: float = 0.005, max_area: float = 0.25, threshold: float = 48.0
    ) -> None:
        if speed <= 0:
            raise ValueError(f"shape_motion: speed={speed} must be > 0 (image widths per second).")
        if not 0 <= min_area < max_area <= 1:
            raise ValueError(f"shape_motion: need 0 <= min_area < max_area <= 1, got {min_area}, {max_area}.")
        self.speed, self.min_area, self.max_area, self.threshold = speed, min_area, max_area, threshold

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Sequence[Any]) -> list[float]:
        n = len(completions)
        fps = columns.get("fps")
        if fps is None or len(fps) != n:
            raise ValueError(
                "reward 'shape_motion' needs the column 'fps' (frames per second of each video); the flow policy "
                "declares it for videos (policy.fps); for other sources add an 'fps' column to the data."
            )
        directions = columns.get("direction") or [None] * n
        scores = []
        for index, (video, rate, direction) in enumerate(zip(completions, fps, directions, strict=True)):
            if direction is not None and direction not in DIRECTIONS:
                raise ValueError(
                    f"reward 'shape_motion': direction of sample {index} is {direction!r}; expected one of "
                    f"{', '.join(DIRECTIONS)} or null."
                )
            scores.append(
                shape_motion_score(
                    as_video(video, name=f"completion {index} of reward 'shape_motion'"),
                    check_fps(rate, name=f"fps of sample {index}"),
                    speed=self.speed,
                    direction=None if direction is None else DIRECTIONS[direction],
                    min_area=self.min_area,
                    max_area=self.max_area,
                    threshold=self.threshold,
                )
            )
        return scores


__all__ = ["DIRECTIONS", "ShapeMotion", "centroids", "foreground_masks", "shape_motion_score"]
