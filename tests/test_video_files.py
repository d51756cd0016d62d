"""Video files: GIF always (exact round trip, identical frames included), MP4 when imageio-ffmpeg is installed."""

from __future__ import annotations

import numpy as np
import pytest

from genalign.video_files import as_video, check_fps, gif_bytes, mp4_encoder, read_video, write_video


def _clip(frames: int = 9, height: int = 16, width: int = 24) -> np.ndarray:
    """A red bar moving right, with runs of identical frames (a GIF writer merges those into one longer frame)."""
    video = np.zeros((frames, height, width, 3), dtype=np.uint8)
    for f in range(frames):
        video[f, :, 2 * (f // 2) : 2 * (f // 2) + 3, 0] = 255
    return video


@pytest.mark.parametrize("fps", [8, 16, 24])
def test_gif_round_trip_gives_back_every_frame_exactly(tmp_path, monkeypatch, fps):
    monkeypatch.setattr("genalign.video_files.mp4_encoder", lambda: None)
    video = _clip()
    path = write_video(video, tmp_path / "clip", fps=fps)
    assert path.name == "clip.gif"
    np.testing.assert_array_equal(read_video(path, fps=fps), video)


def test_mp4_round_trip_has_the_frame_count_and_size_and_close_pixels(tmp_path):
    if mp4_encoder() is None:
        pytest.skip("imageio-ffmpeg is not installed (the video extra)")
    video = _clip(height=15, width=17)  # odd sizes: written as yuv444p, never resized
    path = write_video(video, tmp_path / "clip", fps=16)
    assert path.suffix == ".mp4" and path.read_bytes()[4:8] == b"ftyp"
    decoded = read_video(path)
    assert decoded.shape == video.shape
    assert np.abs(decoded.astype(int) - video).mean() < 12


def test_gif_bytes_hold_one_frame_per_distinct_frame():
    from io import BytesIO

    from PIL import Image

    with Image.open(BytesIO(gif_bytes(_clip(frames=4), fps=4))) as image:
        assert image.format == "GIF" and image.n_frames == 2 and image.size == (24, 16)


def test_bad_videos_and_rates_are_named():
    with pytest.raises(ValueError, match=r"sample 3 has shape \(16, 16, 3\) and dtype uint8; expected a video"):
        as_video(np.zeros((16, 16, 3), dtype=np.uint8), name="sample 3")
    with pytest.raises(ValueError, match=r"dtype float32"):
        as_video(np.zeros((2, 4, 4, 3), dtype=np.float32))
    with pytest.raises(ValueError, match=r"policy.fps=0 must be a positive whole number"):
        check_fps(0, name="policy.fps")
    with pytest.raises(ValueError, match=r"reads .mp4 and .gif"):
        read_video("clip.avi")
