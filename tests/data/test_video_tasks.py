"""The shapes_video procedural task: answers read back from the rendered frames, splits, arguments, registration."""

from __future__ import annotations

import numpy as np
import pytest

from genalign.data.shapes import detect
from genalign.data.sources import DataSourceConfig, load_rows
from genalign.data.video_tasks import DIRECTIONS, shapes_video_rows


@pytest.fixture(scope="module")
def rows():
    return shapes_video_rows(24, seed=0)


def asked(row) -> list[list]:
    """Per frame, the detected shapes with the row's label."""
    return [[s for s in detect(frame) if s.label == row["label"]] for frame in row["video"]["frames"]]


def test_rows_hold_a_clip_and_a_verifiable_question(rows):
    assert {row["task"] for row in rows} == {"frames", "motion"}
    for row in rows:
        frames = row["video"]["frames"]
        assert frames.shape == (4, 48, 48, 3) and frames.dtype == np.uint8 and row["video"]["fps"] == 2.0
        assert row["prompt"].endswith("appear?" if row["task"] == "frames" else "move?")


def test_frame_counts_match_the_frames_that_show_the_shape(rows):
    for row in (r for r in rows if r["task"] == "frames"):
        found = asked(row)
        assert row["answer"] == str(row["count"]) == str(sum(len(f) == 1 for f in found))
        assert all(len(f) <= 1 for f in found)


def test_motion_moves_the_shape_one_equal_step_per_frame_in_the_answered_direction(rows):
    for row in (r for r in rows if r["task"] == "motion"):
        centres = np.array([f[0].center for f in asked(row)])  # [F, 2], one asked shape per frame
        steps = np.diff(centres, axis=0)  # [F - 1, 2]
        unit = np.array(DIRECTIONS[row["direction"]])
        assert row["answer"] == row["direction"]
        assert np.allclose(steps, steps[0]) and np.all(steps @ unit > 0) and np.all(steps @ unit[::-1] == 0)


def test_rows_are_deterministic_and_splits_disjoint():
    def key(row):
        return row["prompt"], row["video"]["frames"].tobytes()

    train, again = shapes_video_rows(16, seed=3), shapes_video_rows(16, seed=3)
    assert [key(r) for r in train] == [key(r) for r in again]
    held_out = shapes_video_rows(16, seed=3, split="eval")
    assert not {key(r) for r in train} & {key(r) for r in held_out}


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ({"num_frames": 1}, "num_frames=1 must be an integer >= 2"),
        ({"kinds": ["count"]}, "kinds=.* must be a non-empty subset"),
        ({"colors": ["red"], "shape_kinds": ["circle"]}, "give 1 label"),
        ({"fps": 0}, "fps=0 must be > 0"),
    ],
)
def test_bad_arguments_name_the_argument(args, match):
    with pytest.raises(ValueError, match=match):
        shapes_video_rows(2, seed=0, **args)


def test_registered_as_the_procedural_task_shapes_video():
    config = DataSourceConfig(source="procedural:shapes_video", args={"size": 3, "seed": 0, "kinds": ["motion"]})
    loaded, direct = load_rows(config), shapes_video_rows(3, seed=0, kinds=["motion"])
    assert [(r["prompt"], r["answer"]) for r in loaded] == [(r["prompt"], r["answer"]) for r in direct]
    assert all(np.array_equal(a["video"]["frames"], b["video"]["frames"]) for a, b in zip(loaded, direct, strict=True))


def test_image_to_video_rows_hold_the_moving_shape_alone_at_the_start_of_its_path():
    """shapes_i2v: the first frame of the motion clip with the same arguments, its still distractor removed; the
    instruction names the shape and the direction that the shape_motion reward checks: the shape moving along the
    clip's path (12 px per frame of 48 at 2 fps: half a width per second) scores high, the source copied scores 0."""
    from genalign.data.shapes import Scene, render
    from genalign.data.video_tasks import shapes_i2v_rows
    from genalign.rewards.video import ShapeMotion

    rows = shapes_i2v_rows(6, 0, split="train")
    clips = shapes_video_rows(6, 0, split="train", kinds=("motion",), keep_scenes=True)
    for row, clip in zip(rows, clips, strict=True):
        assert (
            row["prompt"] == f"The {clip['label']} moves {clip['direction']}." and row["direction"] == clip["direction"]
        )
        (shape,) = detect(row["image"])
        assert shape.label == clip["label"]
        first = [s for s in detect(clip["video"]["frames"][0]) if s.label == clip["label"]]
        assert first and first[0].box == shape.box  # where the clip's shape starts
    alone = np.stack([np.asarray(render(Scene(size=48, shapes=(scene.shapes[-1],)))) for scene in clips[0]["scenes"]])
    still = np.repeat(np.asarray(rows[0]["image"])[None], len(alone), axis=0)  # [F, H, W, 3]
    reward = ShapeMotion(speed=0.5)
    moving_score, still_score = reward(["p", "p"], [alone, still], fps=[2, 2], direction=[rows[0]["direction"]] * 2)
    assert moving_score > 0.8 and still_score == 0.0
    loaded = load_rows(DataSourceConfig(source="procedural:shapes_i2v", args={"size": 2, "seed": 0}))
    assert loaded[0]["image"].size == (48, 48)
