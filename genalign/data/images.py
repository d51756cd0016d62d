"""Image columns for vision-language rows: load, convert and resize to pixel limits.

A row's image column holds one image or a list of images (several images per prompt). Each image is a file path
(``str`` / :class:`~pathlib.Path`), a :class:`PIL.Image.Image`, or a ``{"bytes": ..., "path": ...}`` dict as written
by the Hugging Face ``datasets`` ``Image`` feature. Every image is converted to RGB and resized, keeping its aspect
ratio, so that its area lies within ``[min_pixels, max_pixels]`` and both sides are multiples of ``factor`` (the
vision encoder's patch size times its merge size: 28 for Qwen2-VL / Qwen2.5-VL). Resizing here, before the processor,
makes the size the model sees a known quantity, which grounding rewards need to map boxes back to the original image.

A missing or unreadable image raises :class:`ImageLoadError` naming the row, the column and the path.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from genalign.errors import UserError

#: What an image column may hold for one image.
ImageLike = str | Path | Image.Image | dict[str, Any]


class ImageLoadError(UserError, ValueError):
    """An image of a dataset row is missing, unreadable or of an unsupported type."""


@dataclass
class RowImages:
    """The images of one row, ready for a processor.

    Attributes:
        images: RGB images after resizing, in the order of the column.
        original_sizes: ``(width, height)`` of each image as stored in the dataset.
        input_sizes: ``(width, height)`` of each image after resizing (what the processor receives).
    """

    images: list[Image.Image]
    original_sizes: list[tuple[int, int]]
    input_sizes: list[tuple[int, int]]


def fit_to_pixel_limits(
    width: int, height: int, *, min_pixels: int, max_pixels: int, factor: int = 28
) -> tuple[int, int]:
    """Return ``(width, height)`` with the aspect ratio kept, sides multiples of ``factor``, area in the limits.

    Sides are first rounded to the nearest multiple of ``factor`` (at least ``factor``); when the area then exceeds
    ``max_pixels`` both sides are scaled down (floor), when it is below ``min_pixels`` scaled up (ceil).
    """
    if min_pixels < 1 or max_pixels < min_pixels:
        raise ValueError(
            f"pixel limits must satisfy 1 <= min_pixels <= max_pixels, got min_pixels={min_pixels}, "
            f"max_pixels={max_pixels}; fix the limits in the config"
        )
    if factor * factor > max_pixels:
        raise ValueError(f"max_pixels={max_pixels} is below one {factor}x{factor} block; raise max_pixels")
    if width < 1 or height < 1:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    new_w = max(factor, round(width / factor) * factor)
    new_h = max(factor, round(height / factor) * factor)
    if new_w * new_h > max_pixels:
        scale = math.sqrt(width * height / max_pixels)
        new_w = max(factor, math.floor(width / scale / factor) * factor)
        new_h = max(factor, math.floor(height / scale / factor) * factor)
    elif new_w * new_h < min_pixels:
        scale = math.sqrt(min_pixels / (width * height))
        new_w = math.ceil(width * scale / factor) * factor
        new_h = math.ceil(height * scale / factor) * factor
    return new_w, new_h


def open_image(value: ImageLike, *, row_index: int, column: str, base_dir: Path | None = None) -> Image.Image:
    """Open one image of row ``row_index`` as RGB, raising :class:`ImageLoadError` that names the row and the path."""
    where = f"row {row_index}, column {column!r}"
    if isinstance(value, Image.Image):
        return value.convert("RGB")
    if isinstance(value, dict):
        if value.get("bytes") is not None:
            return _decode(io.BytesIO(value["bytes"]), where=where, source=f"<bytes of {value.get('path') or 'image'}>")
        if value.get("path") is not None:
            value = value["path"]
        else:
            raise ImageLoadError(f"{where}: image dict has neither 'bytes' nor 'path' (keys: {sorted(value)})")
    if not isinstance(value, str | Path):
        raise ImageLoadError(
            f"{where}: expected a path, a PIL image or a {{'bytes', 'path'}} dict, got {type(value).__name__}"
        )
    path = Path(value)
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    if not path.is_file():
        raise ImageLoadError(f"{where}: image file {str(path)!r} does not exist; fix the path or the dataset root")
    with path.open("rb") as handle:
        return _decode(handle, where=where, source=repr(str(path)))


def _decode(stream: Any, *, where: str, source: str) -> Image.Image:
    try:
        image = Image.open(stream)
        image.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise ImageLoadError(f"{where}: cannot read image {source} ({type(err).__name__}: {err})") from err
    return image.convert("RGB")


def load_row_images(
    value: ImageLike | Sequence[ImageLike] | None,
    *,
    row_index: int,
    column: str,
    min_pixels: int,
    max_pixels: int,
    factor: int = 28,
    base_dir: Path | None = None,
) -> RowImages:
    """Load every image of one row (a single image or a list of them) and resize each to the pixel limits.

    ``None`` or an empty list gives a row without images (text-only prompt).
    """
    if value is None:
        values: list[ImageLike] = []
    elif isinstance(value, str | Path | Image.Image | dict):
        values = [value]
    else:
        values = list(value)
    images, original_sizes, input_sizes = [], [], []
    for item in values:
        image = open_image(item, row_index=row_index, column=column, base_dir=base_dir)
        size = fit_to_pixel_limits(*image.size, min_pixels=min_pixels, max_pixels=max_pixels, factor=factor)
        original_sizes.append(image.size)
        input_sizes.append(size)
        images.append(image if size == image.size else image.resize(size, Image.Resampling.BICUBIC))
    return RowImages(images=images, original_sizes=original_sizes, input_sizes=input_sizes)


__all__ = ["ImageLike", "ImageLoadError", "RowImages", "fit_to_pixel_limits", "load_row_images", "open_image"]
