"""Shapes-world VQA rows: answers agree with what is drawn, splits are disjoint, rows are deterministic."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from genalign.data.shapes import detect
from genalign.data.vlm_tasks import compose_scene, format_box, shapes_vqa_rows
from genalign.rewards.vlm import box_iou


@pytest.fixture(scope="module")
def rows():
    return shapes_vqa_rows(120, seed=3)


def test_rows_have_the_documented_columns(rows):
    for row in rows:
        assert {"prompt", "image", "answer", "task", "label", "image_size"} <= set(row)
        assert row["image"].size == (48, 48) and row["image_size"] == [48, 48]
        if row["task"] == "count":
            assert row["prompt"] == f"How many {row['label']}s are there?" and row["answer"] == str(row["count"])
        else:
            assert row["prompt"] == f"Give the box of the {row['label']}." and row["answer"] == format_box(row["box"])


def test_counts_and_boxes_match_the_rendered_image(rows):
    """The detector of the shapes world (exact on rendered scenes) finds what the row claims."""
    for row in rows:
        found = [s for s in detect(row["image"]) if s.label == row["label"]]
        if row["task"] == "count":
            assert len(found) == row["count"]
        else:
            assert len(found) == 1 and box_iou(found[0].box, row["box"]) > 0.85


def test_count_answers_cover_zero_to_three(rows):
    counts = Counter(r["count"] for r in rows if r["task"] == "count")
    assert set(counts) == {0, 1, 2, 3}


def test_rows_are_deterministic_and_splits_disjoint():
    first = shapes_vqa_rows(20, seed=5)
    again = shapes_vqa_rows(20, seed=5)
    assert [r["prompt"] + r["answer"] for r in first] == [r["prompt"] + r["answer"] for r in again]
    assert all(np.array_equal(np.asarray(a["image"]), np.asarray(b["image"])) for a, b in zip(first, again))
    train = {(r["prompt"], np.asarray(r["image"]).tobytes()) for r in shapes_vqa_rows(150, seed=0, split="train")}
    held_out = {(r["prompt"], np.asarray(r["image"]).tobytes()) for r in shapes_vqa_rows(150, seed=0, split="eval")}
    assert not train & held_out


def test_boxes_scale_with_the_rendered_size():
    small = shapes_vqa_rows(10, seed=1, kinds=["ground"], canvas=48, image_size=48)
    large = shapes_vqa_rows(10, seed=1, kinds=["ground"], canvas=48, image_size=96)
    for a, b in zip(small, large):
        assert b["image"].size == (96, 96)
        assert b["box"] == [2 * v for v in a["box"]]


def test_compose_scene_has_exactly_the_asked_targets():
    rng = np.random.default_rng(0)
    for count in range(4):
        scene = compose_scene(
            rng,
            target=("red", "circle"),
            count=count,
            num_distractors=2,
            canvas=48,
            colors=("red", "blue"),
            shape_kinds=("circle", "square"),
            min_side=0.2,
            max_side=0.28,
        )
        assert sum(s.label == "red circle" for s in scene.shapes) == count


def test_bad_arguments_are_errors():
    with pytest.raises(ValueError, match="kinds="):
        shapes_vqa_rows(5, seed=0, kinds=["caption"])
    with pytest.raises(ValueError, match="split='test'"):
        shapes_vqa_rows(5, seed=0, split="test")
    with pytest.raises(ValueError, match="max_count=4"):
        shapes_vqa_rows(5, seed=0, max_count=4)


def test_registered_as_the_procedural_task_shapes_vqa():
    """Configs reach the rows through ``procedural:shapes_vqa``; the loader passes size, seed and the keyword args."""
    from genalign.data import PROCEDURAL_TASKS
    from genalign.data.sources import DataSourceConfig, load_rows

    assert PROCEDURAL_TASKS.get("shapes_vqa") is shapes_vqa_rows
    config = DataSourceConfig(
        source="procedural:shapes_vqa", args={"size": 6, "seed": 2, "split": "eval", "kinds": ["count"]}
    )
    config.validate()
    loaded = load_rows(config)
    direct = shapes_vqa_rows(6, seed=2, split="eval", kinds=("count",))
    assert [(r["prompt"], r["answer"]) for r in loaded] == [(r["prompt"], r["answer"]) for r in direct]
    assert all(r["task"] == "count" for r in loaded)
