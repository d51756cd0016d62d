"""Video files of generated clips: MP4 (H.264) through ``imageio-ffmpeg`` (the optional ``video`` extra, a wheel that
ships its own ffmpeg), else an animated GIF through Pillow, which is always installed; and reading either back.

A video everywhere in genalign is a ``[F, H, W, 3]`` uint8 array (frames, height, width, RGB). MP4s are written as
``yuv420p`` (the pixel format browsers and players accept) when height and width are even, ``yuv444p`` otherwise (4:2:0
chroma needs even sizes; ffmpeg would otherwise refuse), never resized.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np

#: the suffix of the files :func:`write_video` writes with each encoder
SUFFIXES = {"imageio-ffmpeg": ".mp4", "pillow": ".gif"}


def mp4_encoder() -> str | None:
    """``"imageio-ffmpeg"`` when it is installed (MP4 files), else None (videos become animated GIFs)."""
    return "imageio-ffmpeg" if find_spec("imageio_ffmpeg") is not None else None


def is_video(output: Any) -> bool:
    """True for a ``[F, H, W, 3]`` array, the form genalign's video models return."""
    return isinstance(output, np.ndarray) and output.ndim == 4 and output.shape[-1] == 3


def as_video(frames: Any, *, name: str = "video") -> np.ndarray:
    """``frames`` (an array or a list of ``[H, W, 3]`` frames) as a contiguous ``[F, H, W, 3]`` uint8 array."""
    array = np.asarray(frames)
    if array.ndim != 4 or array.shape[-1] != 3 or array.shape[0] == 0 or array.dtype != np.uint8:
        raise ValueError(
            f"{name} has shape {tuple(array.shape)} and dtype {array.dtype}; expected a video as a [F, H, W, 3] "
            "uint8 array with at least one frame"
        )
    return np.ascontiguousarray(array)


def check_fps(fps: Any, *, name: str = "fps") -> int:
    """``fps`` as a positive integer (frames per second), or a clear error naming ``name``."""
    if isinstance(fps, bool) or not isinstance(fps, int | np.integer) or fps < 1:
        raise ValueError(f"{name}={fps!r} must be a positive whole number of frames per second, e.g. 16.")
    return int(fps)


def write_video(frames: Any, stem: str | Path, *, fps: int) -> Path:
    """Write ``frames`` ``[F, H, W, 3]`` uint8 to ``stem`` + ``.mp4`` (with ``imageio-ffmpeg``) or ``.gif``; returns the
    path written. The GIF's frame duration is ``1000 / fps`` ms, rounded to GIF's 10 ms ticks by players."""
    video, fps = as_video(frames), check_fps(fps)
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    if mp4_encoder() is not None:
        return _write_mp4(video, stem.with_name(stem.name + SUFFIXES["imageio-ffmpeg"]), fps)
    return _write_gif(video, stem.with_name(stem.name + SUFFIXES["pillow"]), fps)


def read_video(path: str | Path, *, fps: int | None = None) -> np.ndarray:
    """The frames ``[F, H, W, 3]`` uint8 of an MP4 (needs ``imageio-ffmpeg``) or GIF file written by
    :func:`write_video` (MP4 frames are lossy: close to, not equal to, what was written).

    A GIF writer stores a run of identical frames as one frame shown longer; with ``fps`` each stored GIF frame is
    repeated ``round(duration * fps / 1000)`` times (at least once), which gives back every frame written at ``fps``.
    """
    path = Path(path)
    if path.suffix == ".gif":
        from PIL import Image, ImageSequence

        frames = []
        with Image.open(path) as image:
            for frame in ImageSequence.Iterator(image):
                repeats = 1 if fps is None else max(1, round(frame.info.get("duration", 0) * check_fps(fps) / 1000))
                frames += [np.asarray(frame.convert("RGB"))] * repeats
        return np.stack(frames)
    if path.suffix != ".mp4":
        raise ValueError(f"{str(path)!r}: read_video reads .mp4 and .gif files")
    if mp4_encoder() is None:
        raise ModuleNotFoundError(f"reading {str(path)!r} needs imageio-ffmpeg: pip install 'genalign[video]'")
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path), pix_fmt="rgb24")
    meta = next(reader)
    width, height = meta["size"]
    frames = [np.frombuffer(chunk, dtype=np.uint8).reshape(height, width, 3) for chunk in reader]
    return np.stack(frames)


def _write_mp4(video: np.ndarray, path: Path, fps: int) -> Path:
    import imageio_ffmpeg

    _, height, width, _ = video.shape
    even = height % 2 == 0 and width % 2 == 0
    writer = imageio_ffmpeg.write_frames(
        str(path),
        (width, height),
        fps=fps,
        codec="libx264",
        pix_fmt_out="yuv420p" if even else "yuv444p",
        macro_block_size=1,  # never resize to a multiple of 16
        quality=8,
        ffmpeg_log_level="error",
    )
    writer.send(None)  # start ffmpeg
    for frame in video:
        writer.send(frame.tobytes())
    writer.close()
    return path


def _write_gif(video: np.ndarray, path: Path, fps: int) -> Path:
    path.write_bytes(gif_bytes(video, fps=fps))
    return path


def gif_bytes(frames: Any, *, fps: int) -> bytes:
    """``frames`` ``[F, H, W, 3]`` uint8 as the bytes of an animated GIF (what TensorBoard shows as a video)."""
    import io

    from PIL import Image

    video, fps = as_video(frames), check_fps(fps)
    buffer = io.BytesIO()
    pictures = [Image.fromarray(frame) for frame in video]
    pictures[0].save(buffer, format="GIF", save_all=True, append_images=pictures[1:],
                     duration=max(10, round(1000 / fps)), loop=0, disposal=1)  # fmt: skip
    return buffer.getvalue()


__all__ = ["as_video", "check_fps", "gif_bytes", "is_video", "mp4_encoder", "read_video", "write_video"]
