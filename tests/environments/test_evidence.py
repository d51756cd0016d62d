"""TAPO's tool-level reward [9] (environment ``evidence_zoom``): each ``crop_image`` call earns a reward for covering the
row's evidence box, a turn earns the mean over its crop calls, and a turn without one earns nothing; the rewards reach
the rollout's per-turn rewards."""

from __future__ import annotations

import pytest
from PIL import Image

from genalign.environments import ENVIRONMENTS, EvidenceZoom, ModelTurn, box_coverage


def crop_call(box, zoom=1.0) -> str:
    return f'<tool_call>{{"name": "crop_image", "arguments": {{"box": {box}, "zoom": {zoom}}}}}</tool_call>'


def episode(**args) -> EvidenceZoom:
    environment = ENVIRONMENTS.get("evidence_zoom")(**args)
    environment.reset(prompt="Where is the red square?", image=Image.new("RGB", (48, 48)), box=[0, 0, 12, 12])
    return environment


def test_box_coverage_is_the_share_of_the_evidence_inside_the_crop():
    assert box_coverage([0, 0, 24, 24], [0, 0, 12, 12]) == 1.0
    assert box_coverage([6, 6, 30, 30], [0, 0, 12, 12]) == pytest.approx(36 / 144)
    assert box_coverage([20, 20, 30, 30], [0, 0, 12, 12]) == 0.0
    assert box_coverage([0, 0, 5, 5], [3, 3, 3, 8]) == 0.0  # an empty evidence box


def test_a_turn_earns_the_mean_reward_of_its_crop_calls():
    environment = episode()
    # covers all of the evidence (1), a quarter of it (0 at min_coverage ½), an empty box (an error: 0)
    turn = crop_call([0, 0, 24, 24], 2) + crop_call([6, 6, 30, 30]) + crop_call([5, 5, 5, 5])
    result = environment.step(ModelTurn(turn, index=0))
    assert result.record.counts["ok"] == 2 and result.record.counts["tool_error"] == 1
    assert result.reward == pytest.approx(1 / 3) and not result.done
    final = environment.step(ModelTurn("<answer>top left</answer>", index=1))
    assert final.reward is None and final.done  # no crop call: no tool reward


def test_graded_rewards_and_relative_coordinates():
    environment = episode(graded=True)
    result = environment.step(ModelTurn(crop_call([6, 6, 30, 30]) + crop_call([0, 0, 24, 24])))
    assert result.reward == pytest.approx((36 / 144 + 1.0) / 2)
    relative = episode(coordinates="relative", evidence_coordinates="pixels")
    assert relative.step(ModelTurn(crop_call([0, 0, 0.5, 0.5]))).reward == 1.0  # 24x24 pixels: all the evidence


def test_rows_without_evidence_and_bad_settings_are_named():
    environment = ENVIRONMENTS.get("evidence_zoom")()
    with pytest.raises(KeyError, match="no 'box' value; set evidence_column"):
        environment.reset(prompt="?", image=Image.new("RGB", (8, 8)))
    with pytest.raises(ValueError, match="give the evidence box as 4 numbers"):
        environment.reset(prompt="?", image=Image.new("RGB", (8, 8)), box="[1, 2]")
    with pytest.raises(ValueError, match=r"min_coverage=0 must be in \(0, 1\]"):
        ENVIRONMENTS.get("evidence_zoom")(min_coverage=0)
    with pytest.raises(ValueError, match="evidence_coordinates='inches'"):
        ENVIRONMENTS.get("evidence_zoom")(evidence_coordinates="inches")


def test_a_crop_of_the_whole_image_earns_nothing():
    """Cropping everything contains every evidence box; it must not pay (a policy would learn to crop everything)."""
    environment = episode(graded=True)
    assert environment.step(ModelTurn(crop_call([0, 0, 48, 48]))).reward == 0.0  # 16 times the evidence's area
    assert episode(max_area_ratio=16.0).step(ModelTurn(crop_call([0, 0, 48, 48]))).reward == 1.0
    with pytest.raises(ValueError, match=r"max_area_ratio=0\.5 must be >= 1"):
        ENVIRONMENTS.get("evidence_zoom")(max_area_ratio=0.5)
