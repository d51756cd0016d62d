"""Image and video rewards: JPEG sizes, the GenEval-style shapes reward, frame aggregation, weights, async scoring."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from genalign.data import shapes
from genalign.data.shapes import Scene, Shape
from genalign.rewards import REWARDS
from genalign.rewards.image import AsyncRewards, GenevalShapes, jpeg_kilobytes, shapes_criteria

RED_LEFT_OF_BLUE = Scene(
    32, (Shape("circle", "red", (1, 10, 11, 20)), Shape("square", "blue", (18, 10, 28, 20))), (0, "left of", 1)
)


def _noise_image(seed: int = 0) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8), mode="RGB")


def test_jpeg_rewards_are_the_jpeg_size_in_kilobytes():
    flat, noisy = Image.new("RGB", (32, 32), (128, 128, 128)), _noise_image()
    buffer = io.BytesIO()
    noisy.save(buffer, format="JPEG", quality=95)
    assert jpeg_kilobytes(noisy) == pytest.approx(len(buffer.getvalue()) / 1000)
    compress = REWARDS.get("jpeg_compressibility")()
    incompress = REWARDS.get("jpeg_incompressibility")()
    scores = compress(["p", "p"], [flat, noisy])
    assert scores[0] > scores[1]  # the flat image compresses better
    assert incompress(["p", "p"], [flat, noisy]) == pytest.approx([-s for s in scores])


def test_geneval_shapes_scores_rendered_ground_truth_as_correct():
    rows = shapes.shapes_t2i_rows(60, 0)
    rng = np.random.default_rng(0)
    images, prompts, targets = [], [], []
    for row in rows:  # re-render a scene of each row's prompt: sample until the prompt matches
        while True:
            scene = shapes.sample_scene(rng, template=row["template"])
            if shapes.describe(scene) == row["prompt"]:
                break
        images.append(shapes.render(scene))
        prompts.append(row["prompt"])
        targets.append(row["target"])
    assert GenevalShapes()(prompts, images, target=targets) == [1.0] * len(rows)


def test_geneval_shapes_partial_credit_by_hand():
    image = shapes.render(RED_LEFT_OF_BLUE)
    target = shapes.parse_prompt("a red circle right of a blue square")
    # criteria: red circle count ok, blue square count ok, no extra shapes ok, relation wrong -> 3 / 4
    assert GenevalShapes(partial_credit=True)(["x"], [image], target=[target]) == [0.75]
    assert GenevalShapes()(["x"], [image], target=[target]) == [0.0]
    count_target = shapes.parse_prompt("two red circles")
    # red circles: 1 != 2 (fail), extra shapes: 2 found == 2 asked (pass) -> 1 / 2
    assert GenevalShapes(partial_credit=True)(["x"], [image], target=[count_target]) == [0.5]
    # without the extra-shape criterion only the count is checked
    assert GenevalShapes(partial_credit=True, forbid_extra=False)(["x"], [image], target=[count_target]) == [0.0]


def test_shapes_criteria_extra_objects():
    found = [Shape("circle", "red", (0, 0, 9, 9)), Shape("square", "green", (20, 20, 29, 29))]
    target = shapes.parse_prompt("a red circle")
    assert shapes_criteria(found, target, forbid_extra=True) == [True, False]
    assert shapes_criteria(found, target, forbid_extra=False) == [True]


def test_shapes_criteria_without_kinds_checks_colours_counts_and_relations():
    left, right = Shape("triangle", "red", (0, 10, 9, 19)), Shape("circle", "red", (20, 10, 29, 19))
    blue = Shape("triangle", "blue", (20, 10, 29, 19))
    # "two red circles": with kinds, 1 red circle != 2 (fail); without, 2 red shapes (pass); no extras either way
    two = shapes.parse_prompt("two red circles")
    assert shapes_criteria([left, right], two, forbid_extra=True) == [False, True]
    assert shapes_criteria([left, right], two, forbid_extra=True, match_kind=False) == [True, True]
    # one colour for both objects: the two labels merge into "2 red", and either shape may be the subject
    same = shapes.parse_prompt("a red square right of a red circle")
    assert shapes_criteria([left, right], same, forbid_extra=True, match_kind=False) == [True, True, True]
    assert shapes_criteria([left], same, forbid_extra=True, match_kind=False) == [False, False, False]
    # two colours: the relation is checked with the subject's colour (red left of blue holds, right of fails)
    pair = shapes.parse_prompt("a red square right of a blue circle")
    assert shapes_criteria([left, blue], pair, forbid_extra=True, match_kind=False) == [True, True, True, False]
    assert GenevalShapes(match_kind=False, partial_credit=True)(["x"], [shapes.render(shapes.Scene(32, (left, blue)))],
                                                                target=[pair]) == [0.75]  # fmt: skip


def test_geneval_shapes_target_from_prompt():
    image = shapes.render(RED_LEFT_OF_BLUE)
    reward = REWARDS.get("geneval_shapes")(target_from_prompt=True)
    assert reward(["a red circle left of a blue square", "a red circle above a blue square"], [image, image]) == [
        1.0,
        0.0,
    ]


def test_geneval_shapes_bad_input_names_the_reward_and_what_is_wrong():
    image = shapes.render(RED_LEFT_OF_BLUE)
    with pytest.raises(ValueError, match=r"reward 'geneval_shapes' needs the dataset column 'target'.*\['answer'\]"):
        GenevalShapes()(["p"], [image], answer=["x"])
    with pytest.raises(ValueError, match=r"completion 0 is a PIL image in mode 'L'"):
        GenevalShapes()(["p"], [image.convert("L")], target=[shapes.parse_prompt("a red circle")])
    with pytest.raises(ValueError, match=r"completion 1 has shape \(32, 32\) and dtype uint8"):
        GenevalShapes()(["p", "p"], [image, np.zeros((32, 32), np.uint8)], target=[{"objects": []}] * 2)
    with pytest.raises(ValueError, match="target of sample 0 is 'two red circles'"):
        GenevalShapes()(["p"], [image], target=["two red circles"])
    with pytest.raises(ValueError, match="column 'target' has 2 values for 1 completions"):
        GenevalShapes()(["p"], [image], target=[{}, {}])


def test_geneval_shapes_accepts_uint8_arrays():
    array = np.asarray(shapes.render(RED_LEFT_OF_BLUE))
    assert GenevalShapes(target_from_prompt=True)(["a red circle and a blue square"], [array]) == [1.0]


def test_video_frames_aggregates_mean_and_min():
    good = np.asarray(shapes.render(RED_LEFT_OF_BLUE))
    empty = np.full_like(good, 255)
    video = np.stack([good, good, good, empty])  # [F=4, H, W, 3]
    args = {"target_from_prompt": True}
    prompts = ["a red circle left of a blue square"]
    mean = REWARDS.get("video_frames")(reward="geneval_shapes", args=args, aggregate="mean")
    worst = REWARDS.get("video_frames")(reward="geneval_shapes", args=args, aggregate="min")
    every_other = REWARDS.get("video_frames")(reward="geneval_shapes", args=args, every=2)
    assert mean(prompts, [video]) == [0.75]
    assert worst(prompts, [video]) == [0.0]
    assert every_other(prompts, [video]) == [1.0]  # frames 0 and 2
    with pytest.raises(ValueError, match=r"completion 0 has shape \(32, 32, 3\).*\[F, H, W, 3\]"):
        mean(prompts, [good])
    with pytest.raises(ValueError, match="aggregate='max'"):
        REWARDS.get("video_frames")(reward="geneval_shapes", aggregate="max")


def test_video_frames_passes_columns_per_frame():
    frames = np.stack([np.asarray(shapes.render(RED_LEFT_OF_BLUE))] * 2)
    targets = [shapes.parse_prompt("a red circle"), shapes.parse_prompt("a red circle and a blue square")]
    reward = REWARDS.get("video_frames")(reward="geneval_shapes")
    assert reward(["a", "b"], [frames, frames], target=targets) == [0.0, 1.0]


def test_weighted_sum_by_hand():
    flat = Image.new("RGB", (32, 32), (128, 128, 128))
    image = shapes.render(RED_LEFT_OF_BLUE)
    combined = REWARDS.get("weighted_sum")(
        rewards={
            "geneval_shapes": {"weight": 2.0, "args": {"target_from_prompt": True}},
            "jpeg_compressibility": {"weight": 0.5},
        }
    )
    prompts = ["a red circle left of a blue square"] * 2
    expected = [2.0 * 1.0 - 0.5 * jpeg_kilobytes(image), 2.0 * 0.0 - 0.5 * jpeg_kilobytes(flat)]
    assert combined(prompts, [image, flat]) == pytest.approx(expected)
    with pytest.raises(ValueError, match=r"unknown keys \['wieght'\]"):
        REWARDS.get("weighted_sum")(rewards={"jpeg_compressibility": {"wieght": 1.0}})


def test_weighted_sum_propagates_none(monkeypatch):
    def half_applicable(**_args):
        return lambda prompts, completions, **columns: [None, 1.0]

    monkeypatch.setitem(REWARDS._items, "test_half_applicable", half_applicable)  # removed after the test
    combined = REWARDS.get("weighted_sum")(
        rewards={"test_half_applicable": {"weight": 3.0}, "jpeg_compressibility": {"weight": 0.0}}
    )
    flat = Image.new("RGB", (8, 8))
    assert combined(["a", "b"], [flat, flat]) == [None, 3.0]


def test_async_rewards_match_direct_calls():
    images = [shapes.render(RED_LEFT_OF_BLUE), _noise_image(1)]
    prompts = ["a red circle left of a blue square", "two red circles"]
    fns = {"geneval": GenevalShapes(target_from_prompt=True), "jpeg": REWARDS.get("jpeg_compressibility")()}
    with AsyncRewards(fns, max_workers=2) as pool:
        pending = [pool.submit(prompts, images), pool.submit(prompts[::-1], images[::-1])]
        first, second = (p.result() for p in pending)
    assert first == {name: fn(prompts, images) for name, fn in fns.items()}
    assert second["geneval"] == [0.0, 1.0]
