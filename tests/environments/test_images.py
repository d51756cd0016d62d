"""The crop tool crops the episode's current image at a box (pixels, fractions or thousandths), zooms it within a
pixel budget and returns it as an image observation; bad boxes are error observations."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from genalign.environments import EnvironmentSet, ModelTurn, crop_box, episode_reward


def quadrants() -> Image.Image:
    """A 100x80 image: red top-left, green top-right, blue bottom-left, white bottom-right."""
    image = Image.new("RGB", (100, 80), "white")
    image.paste((255, 0, 0), (0, 0, 50, 40))
    image.paste((0, 255, 0), (50, 0, 100, 40))
    image.paste((0, 0, 255), (0, 40, 50, 80))
    return image


@pytest.mark.parametrize(
    ("box", "coordinates", "color"),
    [([50, 0, 100, 40], "pixels", (0, 255, 0)), ([0, 0.5, 0.5, 1.0], "relative", (0, 0, 255)),
     ([500, 500, 1000, 1000], "thousandths", (255, 255, 255))],
)  # fmt: skip
def test_a_box_in_each_coordinate_system(box, coordinates, color):
    crop, pixels = crop_box(quadrants(), box, zoom=2.0, coordinates=coordinates)
    assert crop.size == (100, 80) and pixels[2] - pixels[0] == 50
    assert set(crop.getdata()) == {color}


def test_boxes_are_clipped_zoom_is_bounded_and_big_crops_shrink_to_the_pixel_budget():
    crop, pixels = crop_box(quadrants(), [-20, -20, 10, 10], zoom=1.0)
    assert pixels == (0, 0, 10, 10) and crop.size == (10, 10)
    crop, _ = crop_box(quadrants(), [0, 0, 100, 80], zoom=4.0, max_pixels=8000)
    assert crop.size == (100, 80)  # 400x320 shrunk by sqrt(8000 / 128000) = 1/4
    for box, zoom, message in [([10, 10, 5, 20], 2.0, "empty"), ([200, 0, 300, 10], 2.0, "empty"),
                               ([1, 2, 3], 2.0, "4 numbers"), ([0, 0, 10, 10], 9.0, "zoom")]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            crop_box(quadrants(), box, zoom=zoom)


def test_the_image_zoom_environment_answers_a_crop_call_with_an_image():
    environments = EnvironmentSet({"zoom": {"name": "image_zoom", "coordinates": "relative"}})
    episode = environments.start({"env": "zoom", "prompt": "What color is the top right?", "image": [quadrants()]})
    assert [s["function"]["name"] for s in episode.tool_schemas] == ["crop_image"]
    assert "fractions 0-1" in episode.tool_schemas[0]["function"]["parameters"]["properties"]["box"]["description"]
    call = {"name": "crop_image", "arguments": {"box": [0.5, 0, 1, 0.5], "zoom": 1}}
    bad = {"name": "crop_image", "arguments": {"box": [0.9, 0.9, 0.1, 0.1]}}
    result = episode.environment.step(
        ModelTurn(f"<tool_call>{json.dumps(call)}</tool_call><tool_call>{json.dumps(bad)}</tool_call>")
    )
    good, error = result.record.results
    assert good.ok and len(good.output.images) == 1 and set(good.output.images[0].getdata()) == {(0, 255, 0)}
    assert good.output.text == "Crop of pixels (50, 0)-(100, 40), shown at 50x40."
    content = good.message()["content"]
    assert content[0]["type"] == "image" and content[1] == {"type": "text", "text": good.output.text}
    assert error.error == "tool_error" and "empty" in error.output.text
    assert not result.done and episode.environment.step(ModelTurn("Green.", index=1)).done
    assert episode.environment.reward() is None  # the run's reward functions score the answer


def test_reviews_answer_a_turn_without_a_call_with_a_zoomed_view_before_the_episode_ends():
    environments = EnvironmentSet({"name": "image_zoom", "coordinates": "relative", "reviews": 1,
                                   "review_box": [0.5, 0, 1, 0.5], "review_zoom": 2, "review_text": "Again: {prompt}"})  # fmt: skip
    episode = environments.start({"prompt": "What color is the top right?", "image": quadrants()})
    first = episode.environment.step(ModelTurn("Red."))
    assert not first.done and not first.record.calls, "a review is the environment's own view, not a tool call"
    (review,) = first.observation.images
    assert review.size == (100, 80) and set(review.getdata()) == {(0, 255, 0)}  # the 50x40 top right, zoomed 2x
    assert first.observation.text == "Again: What color is the top right?"
    assert first.messages() == [{"role": "user", "content": first.observation.content()}]
    assert episode.environment.step(ModelTurn("Green.", index=1)).done, "no review left: the episode ends"
    whole = EnvironmentSet({"name": "image_zoom", "reviews": 2}).start({"prompt": "?", "image": quadrants()})
    assert whole.environment.step(ModelTurn("?")).observation.images[0].size == (100, 80)  # default: the whole image


def test_review_options_are_checked():
    with pytest.raises(ValueError, match=r"reviews=-1 .*>= 0"):
        EnvironmentSet({"name": "image_zoom", "reviews": -1})
    with pytest.raises(ValueError, match=r"review_box=\[0, 0, 1\] .*4 numbers"):
        EnvironmentSet({"name": "image_zoom", "review_box": [0, 0, 1]})
    with pytest.raises(ValueError, match=r"review_zoom=9 .*max_zoom=4"):
        EnvironmentSet({"name": "image_zoom", "review_zoom": 9})
    environments = EnvironmentSet({"name": "image_zoom", "reviews": 1, "review_text": "{question}"})
    with pytest.raises(ValueError, match=r"review_text='\{question\}'.*\['image', 'prompt'\]"):
        environments.create({"prompt": "?", "image": quadrants()}).reset(prompt="?", image=quadrants())


def test_with_an_answer_column_the_environment_scores_the_answer_of_the_last_turn():
    environments = EnvironmentSet({"name": "image_zoom", "reviews": 1, "answer_column": "answer"})
    row = {"prompt": "How many red shapes?", "image": quadrants(), "answer": 1}
    for first, last, reward in [("<answer>1</answer>", "<think>again</think><answer>2</answer>", 0.0),
                                ("<answer>2</answer>", "<think>again</think><answer> 1 </answer>", 1.0),
                                ("<answer>1</answer>", "Answer: 1", 1.0), ("<answer>1</answer>", "<think>", 0.0)]:  # fmt: skip
        episode = environments.start(row)
        assert not episode.environment.step(ModelTurn(first)).done
        assert episode.environment.step(ModelTurn(last, index=1)).done
        assert episode_reward(episode.environment) == reward, (first, last)
    with pytest.raises(KeyError, match=r"no 'answer' value; set answer_column"):
        environments.start({"prompt": "?", "image": quadrants()})
