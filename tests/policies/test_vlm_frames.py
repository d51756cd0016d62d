"""The VLM family's temporal perception feature ``logp_frames_shuffled`` (Video-KTR [230]): a row's images are the
frames of a video; the feature re-scores the actions with the frames in reverse order (embedded shapes-vlm)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.data.vlm_tasks import shapes_vqa_rows
from genalign.policies.base import ScoreRequest
from genalign.policies.vlm import VLMPolicyConfig, build_policy
from genalign.policies.vlm.perception import reversed_frame_patches

torch.set_num_threads(1)
SHAPES = {"kinds": ["count"], "colors": ["red", "green", "blue"], "shape_kinds": ["circle", "square"]}


def test_reversed_frame_patches_by_hand():
    grids = torch.tensor([[1, 1, 2], [1, 2, 1], [1, 1, 3], [1, 1, 2], [1, 1, 2], [1, 1, 1]])  # patches 2 2 3 2 2 1
    # sample 0: 3 frames (2, 2, 3 patches): frames 0 and 2 differ in grid, so all stay (1 is the middle); sample 1: 2 equal frames
    # swap; sample 2: one frame stays
    index = reversed_frame_patches(grids, [3, 2, 1])
    assert index.tolist() == [0, 1, 2, 3, 4, 5, 6, 9, 10, 7, 8, 11]


@pytest.fixture(scope="module")
def video_policy_and_rollout():
    torch.manual_seed(0)
    policy = build_policy(VLMPolicyConfig(max_new_tokens=12, min_pixels=256, max_pixels=784), "cpu")
    rows = shapes_vqa_rows(4, seed=0, **SHAPES)
    frames = [rows[0] | {"image": [rows[0]["image"], rows[1]["image"]]}, rows[2] | {"image": [rows[3]["image"]]}]
    return policy, policy.rollout(frames, group_size=2)


def test_frames_shuffled_changes_only_samples_with_two_frames(video_policy_and_rollout):
    policy, rollout = video_policy_and_rollout
    assert [int(g.shape[0]) for g in rollout.per_sample["image_grid_thw"]] == [2, 2, 1, 1]
    assert "logp_frames_shuffled" in policy.capabilities.signals
    with torch.no_grad():
        out = policy.score(rollout, ScoreRequest.of("logp_frames_shuffled", "logp_without_image"))
    shuffled, mask = out["logp_frames_shuffled"], rollout.action_mask
    assert shuffled.shape == out.logp.shape and not shuffled.requires_grad
    assert ((shuffled[:2] - out.logp[:2]).abs() * mask[:2]).sum() > 1e-4  # reversed frames change the log-probs
    torch.testing.assert_close(shuffled[2:], out.logp[2:], atol=1e-5, rtol=0)  # one frame: nothing to shuffle
    with torch.no_grad():
        parts = [policy.score(rollout.select(i), ScoreRequest.of("logp_frames_shuffled")) for i in ([0, 2], [1, 3])]
    joined = torch.zeros_like(shuffled)
    joined[[0, 2]], joined[[1, 3]] = parts[0]["logp_frames_shuffled"], parts[1]["logp_frames_shuffled"]
    torch.testing.assert_close(joined * mask, shuffled * mask, atol=1e-5, rtol=0)
