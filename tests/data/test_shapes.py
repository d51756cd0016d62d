"""The shapes world: sampling, rendering, prompts, detection, prompt rows."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from genalign.data import shapes
from genalign.data.shapes import Scene, Shape


def _key(found: list[Shape]) -> list[tuple]:
    return sorted((s.kind, s.color, s.box) for s in found)


@pytest.mark.parametrize("size", [32, 64])
def test_detect_recovers_every_rendered_scene(size):
    rng = np.random.default_rng(0)
    for _ in range(300):
        scene = shapes.sample_scene(rng, size=size)
        assert _key(shapes.detect(shapes.render(scene))) == _key(list(scene.shapes))


def test_detect_on_upscaled_render_scales_boxes():
    scene = Scene(size=32, shapes=(Shape("square", "red", (2, 4, 12, 14)),))
    (found,) = shapes.detect(shapes.render(scene, size=64))
    assert found == Shape("square", "red", (4, 8, 24, 28))


def test_detect_tolerates_colour_drift_and_noise_specks():
    scene = Scene(
        size=32,
        shapes=(Shape("circle", "blue", (1, 1, 13, 13)), Shape("triangle", "yellow", (16, 16, 28, 28))),
    )
    pixels = np.asarray(shapes.render(scene)).astype(np.int16)
    pixels = pixels + np.random.default_rng(0).integers(-25, 26, size=pixels.shape)  # colour drift
    pixels[30, 2] = shapes.PALETTE["red"]  # a one-pixel speck is noise, not a shape
    found = shapes.detect(np.clip(pixels, 0, 255).astype(np.uint8))
    assert [(s.color, s.kind) for s in found] == [("blue", "circle"), ("yellow", "triangle")]


def test_classify_blob_by_hand_made_masks():
    square = np.argwhere(np.ones((10, 10), dtype=bool))
    yy, xx = np.mgrid[:11, :11]
    disk = np.argwhere((yy - 5) ** 2 + (xx - 5) ** 2 <= 25)
    triangle = np.argwhere(np.abs(xx - 5) <= yy / 2)  # apex at the top row, 11 wide at the bottom
    assert shapes.classify_blob(square) == "square"
    assert shapes.classify_blob(disk) == "circle"
    assert shapes.classify_blob(triangle) == "triangle"


def test_detect_rejects_non_rgb_arrays():
    with pytest.raises(ValueError, match=r"RGB image as \[H, W, 3\].*\(8, 8\)"):
        shapes.detect(np.zeros((8, 8), dtype=np.uint8))


def test_describe_and_parse_round_trip():
    rng = np.random.default_rng(1)
    for template in shapes.TEMPLATES:
        for _ in range(50):
            scene = shapes.sample_scene(rng, template=template)
            target = shapes.parse_prompt(shapes.describe(scene))
            assert sum(o["count"] for o in target["objects"]) == len(scene.shapes)
            assert (target["relation"] is not None) == (template == "relation")


def test_describe_by_hand():
    two_red = Scene(32, (Shape("circle", "red", (0, 0, 9, 9)), Shape("circle", "red", (20, 20, 29, 29))))
    assert shapes.describe(two_red) == "two red circles"
    related = Scene(
        32, (Shape("square", "blue", (0, 10, 9, 19)), Shape("triangle", "green", (20, 10, 29, 19))), (0, "left of", 1)
    )
    assert shapes.describe(related) == "a blue square left of a green triangle"
    assert shapes.parse_prompt("A blue square left of a green triangle.") == {
        "objects": [
            {"color": "blue", "kind": "square", "count": 1},
            {"color": "green", "kind": "triangle", "count": 1},
        ],
        "relation": {"subject": 0, "relation": "left of", "object": 1},
    }


@pytest.mark.parametrize("prompt", ["a purple circle", "two red hexagons", "a cat", "two red circles above a square"])
def test_parse_prompt_rejects_text_outside_the_grammar(prompt):
    with pytest.raises(ValueError, match=r"not in the shapes grammar|spatial relation needs single objects"):
        shapes.parse_prompt(prompt)


def test_relation_holds_uses_the_dominant_axis():
    assert shapes.relation_holds((0, 0), (10, 3), "left of")
    assert not shapes.relation_holds((0, 0), (10, 12), "left of")  # mostly above, not left
    assert shapes.relation_holds((0, 0), (3, 10), "above")
    assert shapes.relation_holds((10, 0), (0, 1), "right of")
    assert shapes.relation_holds((0, 10), (1, 0), "below")
    with pytest.raises(ValueError, match="relation='near'"):
        shapes.relation_holds((0, 0), (1, 1), "near")


def test_sample_scene_is_deterministic_and_validates():
    a = shapes.sample_scene(np.random.default_rng(5), size=48)
    b = shapes.sample_scene(np.random.default_rng(5), size=48)
    assert a == b and a.size == 48
    with pytest.raises(ValueError, match=r"colors=.*purple"):
        shapes.sample_scene(np.random.default_rng(0), colors=["purple"])
    with pytest.raises(ValueError, match="template='grid'"):
        shapes.sample_scene(np.random.default_rng(0), template="grid")


def test_render_is_rgb_of_the_requested_size():
    image = shapes.render(shapes.sample_scene(np.random.default_rng(0)), size=40)
    assert isinstance(image, Image.Image) and image.mode == "RGB" and image.size == (40, 40)


def test_rows_carry_targets_and_splits_are_disjoint():
    train = shapes.shapes_t2i_rows(200, 0, split="train")
    test = shapes.shapes_t2i_rows(100, 0, split="test")
    assert len(train) == 200 and len(test) == 100
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    for row in train[:20]:
        assert row["target"] == shapes.parse_prompt(row["prompt"])
        assert row["split"] == "train"
    assert shapes.shapes_t2i_rows(10, 3) == shapes.shapes_t2i_rows(10, 3)
    assert {r["template"] for r in shapes.shapes_t2i_rows(60, 1, templates=["count"])} == {"count"}
