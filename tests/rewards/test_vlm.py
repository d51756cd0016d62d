"""VLM rewards: box parsing and IoU (rescaled to the original image), counting, answer accuracy, unparsable outputs."""

from __future__ import annotations

import pytest

from genalign.rewards import REWARDS
from genalign.rewards.vlm import answer_part, box_iou, parse_box, parse_count, rescale_box


@pytest.mark.parametrize(
    "text, box",
    [
        ("[10, 20, 30, 40]", (10.0, 20.0, 30.0, 40.0)),
        ("the box is (1.5,2,3.5, 4)", (1.5, 2.0, 3.5, 4.0)),
        ('{"bbox_2d": [5, 6, 7, 8], "label": "cat"}', (5.0, 6.0, 7.0, 8.0)),
        ("(10,20),(30,40)", (10.0, 20.0, 30.0, 40.0)),
        ("first [1, 1, 2, 2] then [3, 3, 4, 4]", (1.0, 1.0, 2.0, 2.0)),
    ],
)
def test_parse_box_spellings(text, box):
    assert parse_box(text) == box


@pytest.mark.parametrize("text", ["no box here", "[1, 2, 3]", "[a, b, c, d]", "[30, 20, 10, 40]", "[1, 5, 2, 5]"])
def test_parse_box_unparsable_or_degenerate(text):
    assert parse_box(text) is None


def test_box_iou_hand_computed():
    assert box_iou([0, 0, 10, 10], [0, 0, 10, 10]) == 1.0
    assert box_iou([0, 0, 10, 10], [5, 0, 15, 10]) == pytest.approx(50 / 150)
    assert box_iou([0, 0, 10, 10], [20, 20, 30, 30]) == 0.0
    assert box_iou([0, 0, 4, 4], [1, 1, 3, 3]) == pytest.approx(4 / 16)


def test_rescale_box():
    assert rescale_box([10, 20, 30, 40], (100, 200), (50, 400)) == (5.0, 40.0, 15.0, 80.0)


def test_box_iou_reward_rescales_input_pixels_to_the_original_image():
    reward = REWARDS.get("box_iou")()
    # the model saw a 56 x 28 resize of a 112 x 84 image; its box [14, 7, 28, 14] is [28, 21, 56, 42] originally
    out = reward(
        ["q"],
        ["<think>look</think><answer>[14, 7, 28, 14]</answer>"],
        box=[[28, 21, 56, 42]],
        image_sizes=[[(112, 84)]],
        image_input_sizes=[[(56, 28)]],
    )
    assert out == [pytest.approx(1.0)]


def test_box_iou_reward_normalized_1000_and_threshold():
    reward = REWARDS.get("box_iou")(box_frame="normalized_1000", threshold=0.5)
    completions = ["<answer>(250,250),(500,500)</answer>", "<answer>[250, 250, 400, 400]</answer>"]
    # on a 200 x 100 image, (250,250),(500,500) -> [50, 25, 100, 50]; [250..400] -> [50, 25, 80, 40] (IoU 0.36)
    out = reward(["q", "q"], completions, box=[[50, 25, 100, 50]] * 2, image_sizes=[[(200, 100)]] * 2)
    assert out == [1.0, 0.0]


def test_unparsable_box_gets_zero_and_is_counted():
    reward = REWARDS.get("box_iou")(box_frame="original_pixels")
    completions = [
        "<answer>[0, 0, 10, 10]</answer>",
        "<answer>somewhere left</answer>",
        "<answer>[5, 5, 1, 1]</answer>",
    ]
    out = reward(["q"] * 3, completions, box=[[0, 0, 10, 10]] * 3)
    assert out == [1.0, 0.0, 0.0]
    assert reward.pop_metrics() == {"unparsable_frac": pytest.approx(2 / 3), "num_unparsable": 2.0}
    assert reward.pop_metrics() == {"unparsable_frac": 0.0, "num_unparsable": 0.0}  # reset after each pop
    assert reward.num_scored == 3 and reward.num_unparsable == 2


def test_box_iou_needs_the_size_columns_for_input_pixels():
    reward = REWARDS.get("box_iou")()
    with pytest.raises(ValueError, match="needs the image_sizes and image_input_sizes columns"):
        reward(["q"], ["[0, 0, 1, 1]"], box=[[0, 0, 1, 1]])
    with pytest.raises(ValueError, match="needs the dataset column 'box'"):
        reward(["q"], ["[0, 0, 1, 1]"])


def test_box_none_is_not_applicable():
    reward = REWARDS.get("box_iou")(box_frame="original_pixels")
    assert reward(["q"], ["[0, 0, 1, 1]"], box=[None]) == [None]


def test_count_accuracy_and_unparsable_counts():
    reward = REWARDS.get("count_accuracy")()
    completions = [
        "<think>x</think><answer>3</answer>",
        "<answer>three</answer>",
        "<answer>2</answer>",
        "<answer>?</answer>",
    ]
    assert reward(["q"] * 4, completions, count=[3, 3, 3, 3]) == [1.0, 1.0, 0.0, 0.0]
    assert reward.pop_metrics()["num_unparsable"] == 1.0


def test_count_accuracy_requiring_answer_tags_rejects_a_bare_number():
    """The bare-number hack of the shapes demo: accepted by default, unparsable (0) with require_answer_tags."""
    completions = ["2", "<think>t</think><answer>2</answer>", "<answer>2", "there are 2"]
    lenient = REWARDS.get("count_accuracy")()
    strict = REWARDS.get("count_accuracy")(require_answer_tags=True)
    assert lenient(["q"] * 4, completions, count=[2] * 4) == [1.0, 1.0, 1.0, 1.0]
    assert strict(["q"] * 4, completions, count=[2] * 4) == [0.0, 1.0, 0.0, 0.0]
    assert strict.pop_metrics() == {"unparsable_frac": 0.75, "num_unparsable": 3.0}


def test_count_accuracy_rejects_a_non_boolean_option():
    with pytest.raises(ValueError, match="require_answer_tags='yes'"):
        REWARDS.get("count_accuracy")(require_answer_tags="yes")


def test_parse_count():
    assert parse_count(" 4 ") == 4 and parse_count("Two.") == 2 and parse_count("there are 5 circles") == 5
    assert parse_count("between 2 and 3") is None and parse_count("many") is None


def test_answer_accuracy_exact_and_symbolic():
    exact = REWARDS.get("answer_accuracy")(mode="exact")
    symbolic = REWARDS.get("answer_accuracy")(mode="symbolic")
    completions = ["<think>t</think><answer> B </answer>", "<answer>1/2</answer>", "<answer>\\frac{1}{2}</answer>"]
    assert exact(["q"] * 3, completions, answer=["b", "0.5", "0.5"]) == [1.0, 0.0, 0.0]
    assert symbolic(["q"] * 3, completions, answer=["C", "0.5", "0.5"]) == [0.0, 1.0, 1.0]
    assert exact(["q"], ["x"], answer=[None]) == [None]


def test_answer_part_prefers_the_last_answer_tag():
    assert answer_part("<answer>1</answer> <answer>2</answer>") == "2"
    assert answer_part("plain 7") == "plain 7"


def test_think_answer_format_is_the_text_format_reward():
    fmt = REWARDS.get("format_regex")()
    assert fmt(["q", "q"], ["<think>a</think><answer>1</answer>", "<answer>1</answer>"]) == [1.0, 0.0]
