"""Source images of flow rows (image-to-image, editing, image-to-video): read from the row column
``policy.source_column`` (a path, a PIL image or a ``{"bytes", "path"}`` dict, as VLM rows carry images:
:func:`genalign.data.images.open_image`), one RGB image per row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PIL import Image

from genalign.data.images import ImageLoadError, open_image


def source_images(rows: Sequence[dict[str, Any]], column: str) -> list[Image.Image]:
    """One RGB source image per row from ``row[column]``; a clear error for a missing column or a list of images."""
    images = []
    for index, row in enumerate(rows):
        value = row.get(column)
        if value is None:
            raise ImageLoadError(
                f"row {index} has no source image in column {column!r} (keys: {sorted(row)}); this flow architecture "
                "needs one per row: add the column or set policy.source_column to the column that holds it."
            )
        if isinstance(value, list | tuple):
            raise ImageLoadError(
                f"row {index}, column {column!r}: holds {len(value)} images; a flow row takes one source image."
            )
        images.append(open_image(value, row_index=index, column=column))
    return images
