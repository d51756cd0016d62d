"""Videos of VLM rows: decoded to frames, sampled to ``policy.video_fps`` / ``policy.max_frames``, resized.

A row's video is one of:

* a file path: animated GIF / WebP / PNG (decoded with PIL, always installed), ``.npy`` (an array ``[F, H, W, 3]``),
  or any other container (MP4, ...) decoded with PyAV when it is installed (else an error naming the fix);
* a list of frames (PIL images or ``[H, W, 3]`` arrays), or an array / tensor ``[F, H, W, 3]`` (``uint8``);
* a mapping ``{"frames": ..., "fps": ...}`` (frames as above, or frame file paths) or ``{"path": ...}``.

A row holds one video or a list of videos (a list of paths, arrays ``[F, H, W, 3]`` or mappings).

Frames of a list or array come at ``fps`` when the mapping gives it, else they are taken as already at
``policy.video_fps``. Sampling keeps ``n = clip(floor(F * video_fps / fps), 1, max_frames)`` frames at the indices
``floor(k * F / n)``, ``k = 0 .. n - 1`` (the rule of transformers' video processors), so the kept frames are evenly
spread over the clip; their rate is ``fps * n / F``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageSequence

from genalign.data.images import fit_to_pixel_limits, open_image

#: file suffixes PIL decodes as frame sequences
PIL_VIDEO_SUFFIXES = (".gif", ".webp", ".png", ".apng")


@dataclass
class RowVideo:
    """One sampled video.

    Attributes:
        frames: ``[n, H, W, 3]`` uint8, the sampled frames as stored (what rewards receive).
        model_frames: ``[n, h, w, 3]`` uint8, the same frames resized to the pixel limits (what the processor gets).
        fps: rate of the sampled frames (frames per second).
        indices: index of each sampled frame in the source clip.
        source_fps: rate of the source clip.
    """

    frames: np.ndarray
    model_frames: np.ndarray
    fps: float
    indices: list[int]
    source_fps: float


def _pil_frames(path: Path) -> tuple[np.ndarray, float | None]:
    with Image.open(path) as clip:
        durations, frames = [], []
        for frame in ImageSequence.Iterator(clip):
            durations.append(frame.info.get("duration"))
            frames.append(np.asarray(frame.convert("RGB")))
    known = [d for d in durations if d]
    return np.stack(frames), (1000.0 / float(np.mean(known)) if known else None)


def _av_frames(path: Path) -> tuple[np.ndarray, float | None]:
    try:
        import av
    except ImportError:
        raise ValueError(
            f"cannot decode the video {str(path)!r}: PyAV is not installed (fix: pip install av, or give the video "
            f"as an animated GIF/WebP ({', '.join(PIL_VIDEO_SUFFIXES)}), a .npy array [F, H, W, 3] or a list of "
            "frames)"
        ) from None
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
        rate = float(stream.average_rate) if stream.average_rate else None
    return np.stack(frames), rate


def _as_frames(value: Any, row_index: int, column: str, base_dir: Path | None) -> tuple[np.ndarray, float | None]:
    """``[F, H, W, 3]`` uint8 frames of ``value`` and their rate when the source says it."""
    if isinstance(value, Mapping):
        if "path" in value:
            return _as_frames(value["path"], row_index, column, base_dir)
        if "frames" not in value:
            raise ValueError(f"row {row_index}: column {column!r} is a mapping without 'frames' or 'path'")
        frames, _ = _as_frames(value["frames"], row_index, column, base_dir)
        return frames, float(value["fps"]) if value.get("fps") else None
    if isinstance(value, str | Path):
        path = Path(value).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        if not path.exists():
            raise ValueError(f"row {row_index}: the video {str(value)!r} of column {column!r} does not exist ({path})")
        if path.suffix.lower() == ".npy":
            return _as_frames(np.load(path), row_index, column, base_dir)
        if path.suffix.lower() in PIL_VIDEO_SUFFIXES:
            return _pil_frames(path)
        return _av_frames(path)
    if hasattr(value, "detach"):  # a tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        if value.ndim != 4 or value.shape[-1] != 3:
            raise ValueError(
                f"row {row_index}: the video array of column {column!r} has shape {value.shape}; expected [F, H, W, 3]"
            )
        return value.astype(np.uint8, copy=False), None
    if isinstance(value, Sequence) and value:
        frames = [
            np.asarray(open_image(f, row_index=row_index, column=column, base_dir=base_dir).convert("RGB"))
            if not isinstance(f, np.ndarray)
            else f
            for f in value
        ]
        if len({f.shape for f in frames}) != 1:
            raise ValueError(f"row {row_index}: the frames of column {column!r} differ in size; give equal frames")
        return np.stack(frames).astype(np.uint8, copy=False), None
    raise ValueError(
        f"row {row_index}: column {column!r} holds {type(value).__name__}; expected a video file path, a list of "
        "frames, an array [F, H, W, 3] or {'frames': ..., 'fps': ...}"
    )


def sampled_indices(num_frames: int, source_fps: float, video_fps: float, max_frames: int) -> list[int]:
    """Indices of the kept frames of a clip of ``num_frames`` at ``source_fps`` (module docstring)."""
    count = min(max(int(num_frames * video_fps / source_fps), 1), max_frames, num_frames)
    return [int(k * num_frames / count) for k in range(count)]


def load_video(
    value: Any,
    *,
    row_index: int,
    column: str,
    video_fps: float,
    max_frames: int,
    min_pixels: int,
    max_pixels: int,
    factor: int,
    base_dir: Path | None = None,
) -> RowVideo:
    """The video of one row, decoded, sampled and resized (module docstring); errors name the row and column."""
    frames, rate = _as_frames(value, row_index, column, base_dir)
    source_fps = rate or video_fps
    indices = sampled_indices(frames.shape[0], source_fps, video_fps, max_frames)
    kept = frames[indices]  # [n, H, W, 3]
    height, width = kept.shape[1:3]
    size = fit_to_pixel_limits(width, height, min_pixels=min_pixels, max_pixels=max_pixels, factor=factor)
    resized = kept
    if size != (width, height):
        resized = np.stack([np.asarray(Image.fromarray(f).resize(size, Image.Resampling.BICUBIC)) for f in kept])
    fps = source_fps * len(indices) / frames.shape[0]
    return RowVideo(frames=kept, model_frames=resized, fps=fps, indices=indices, source_fps=source_fps)


def load_row_videos(value: Any, **kwargs: Any) -> list[RowVideo]:
    """The videos of one row: ``None`` (none), one video, or a list of videos (each a path, an array or a mapping;
    a list of frames is one video only when given inside a mapping or as an array)."""
    if value is None:
        return []
    videos = isinstance(value, list) and value and all(isinstance(v, str | Path | Mapping | np.ndarray) for v in value)
    if videos and not all(isinstance(v, np.ndarray) and v.ndim == 3 for v in value):  # not a list of frames
        return [load_video(v, **kwargs) for v in value]
    return [load_video(value, **kwargs)]


__all__ = ["PIL_VIDEO_SUFFIXES", "RowVideo", "load_row_videos", "load_video", "sampled_indices"]
