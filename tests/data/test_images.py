"""Image columns: paths, PIL images and byte dicts; several images per row; pixel limits; clear errors."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from genalign.data.images import ImageLoadError, fit_to_pixel_limits, load_row_images, open_image


def test_fit_to_pixel_limits_hand_computed():
    # already a multiple of 28 and inside the limits: unchanged
    assert fit_to_pixel_limits(56, 84, min_pixels=28 * 28, max_pixels=10_000, factor=28) == (56, 84)
    # rounded to the nearest multiple: 60 -> 56, 100 -> 112 (area 6272 within limits)
    assert fit_to_pixel_limits(60, 100, min_pixels=28 * 28, max_pixels=10_000, factor=28) == (56, 112)
    # too large: 1000 x 500 with max 100_000 -> scale sqrt(5) = 2.236; 447.2 -> 420, 223.6 -> 196 (floor to 28)
    assert fit_to_pixel_limits(1000, 500, min_pixels=784, max_pixels=100_000, factor=28) == (420, 196)
    # too small: 20 x 10 with min 3136 -> scale sqrt(15.68) = 3.96; 79.2 -> 84, 39.6 -> 56 (ceil to 28)
    assert fit_to_pixel_limits(20, 10, min_pixels=3136, max_pixels=100_000, factor=28) == (84, 56)


@pytest.mark.parametrize("size", [(5, 700), (640, 480), (33, 33), (3000, 2000)])
def test_fit_to_pixel_limits_respects_the_limits_and_the_factor(size):
    width, height = fit_to_pixel_limits(*size, min_pixels=32 * 32, max_pixels=256 * 256, factor=16)
    assert width % 16 == 0 and height % 16 == 0
    assert width * height <= 256 * 256
    assert width * height >= 16 * 16


def test_fit_to_pixel_limits_rejects_bad_limits():
    with pytest.raises(ValueError, match="min_pixels=500, max_pixels=100"):
        fit_to_pixel_limits(10, 10, min_pixels=500, max_pixels=100)


def test_load_row_images_accepts_paths_pil_and_bytes(tmp_path):
    red = Image.new("RGB", (64, 32), (255, 0, 0))
    red.save(tmp_path / "red.png")
    buffer = io.BytesIO()
    Image.new("L", (28, 28), 128).save(buffer, format="PNG")
    loaded = load_row_images(
        ["red.png", red, {"bytes": buffer.getvalue(), "path": None}],
        row_index=3,
        column="images",
        min_pixels=28 * 28,
        max_pixels=64 * 64,
        factor=28,
        base_dir=tmp_path,
    )
    assert loaded.original_sizes == [(64, 32), (64, 32), (28, 28)]
    assert loaded.input_sizes == [(56, 28), (56, 28), (28, 28)]
    assert [im.size for im in loaded.images] == loaded.input_sizes
    assert all(im.mode == "RGB" for im in loaded.images)


def test_single_image_and_no_image():
    one = load_row_images(Image.new("RGB", (28, 28)), row_index=0, column="image", min_pixels=1, max_pixels=10**6)
    assert len(one.images) == 1
    none = load_row_images(None, row_index=0, column="image", min_pixels=1, max_pixels=10**6)
    assert none.images == [] and none.original_sizes == []


def test_missing_file_names_row_column_and_path(tmp_path):
    with pytest.raises(ImageLoadError, match=r"row 7, column 'image': image file '.*nope\.jpg' does not exist"):
        load_row_images([str(tmp_path / "nope.jpg")], row_index=7, column="image", min_pixels=1, max_pixels=10**6)


def test_corrupt_file_names_row_column_and_path(tmp_path):
    path = tmp_path / "truncated.png"
    buffer = io.BytesIO()
    Image.new("RGB", (40, 40), (0, 0, 255)).save(buffer, format="PNG")
    path.write_bytes(buffer.getvalue()[:60])  # a PNG cut short
    with pytest.raises(ImageLoadError, match=r"row 2, column 'img': cannot read image '.*truncated\.png'"):
        open_image(str(path), row_index=2, column="img")


def test_unsupported_value_type_is_an_error():
    with pytest.raises(ImageLoadError, match=r"row 0, column 'image': expected a path, a PIL image .* got int"):
        open_image(42, row_index=0, column="image")
    with pytest.raises(ImageLoadError, match="neither 'bytes' nor 'path'"):
        open_image({"url": "x"}, row_index=0, column="image")
