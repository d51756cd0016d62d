"""Native video for Qwen-VL and LLaVA-OneVision: decoding and frame sampling, the processor's video path through
rollout and scoring, and tiny models trained on the shapes_video task by a reward that reads the frames it receives."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from PIL import Image

from genalign.data.shapes import detect
from genalign.data.video_tasks import shapes_video_rows
from genalign.data.vlm_tasks import shapes_vqa_rows
from genalign.policies.base import ScoreRequest
from genalign.policies.vlm import VLMPolicyConfig, build_policy
from genalign.policies.vlm.video import load_row_videos, load_video, sampled_indices
from genalign.rewards.vlm import answer_part, parse_count
from tests.policies.vlm.tiny_models import tiny_model_dir

torch.set_num_threads(1)
LIMITS = {"min_pixels": 256, "max_pixels": 2304}


def clip(num_frames: int, size: int = 24) -> np.ndarray:
    """``[F, size, size, 3]`` frames whose red channel is the frame index (so each frame is recognisable)."""
    frames = np.zeros((num_frames, size, size, 3), dtype=np.uint8)
    frames[..., 0] = np.arange(num_frames, dtype=np.uint8)[:, None, None]
    return frames


def load(value, **overrides):
    args = {"row_index": 0, "column": "video", "video_fps": 2.0, "max_frames": 16, "factor": 12, **LIMITS}
    return load_video(value, **(args | overrides))


def test_frames_are_sampled_evenly_to_the_requested_rate_and_count():
    # 10 frames at 10 fps = 1 s; at 2 fps: floor(10 * 2 / 10) = 2 frames at floor(k * 10 / 2) = 0, 5
    assert sampled_indices(10, 10.0, 2.0, 16) == [0, 5]
    # 12 frames at 2 fps sampled at 2 fps but at most 4: floor(k * 12 / 4) = 0, 3, 6, 9
    assert sampled_indices(12, 2.0, 2.0, 4) == [0, 3, 6, 9]
    # a clip shorter than one sampled frame still gives one frame; never more frames than the clip has
    assert sampled_indices(3, 30.0, 2.0, 16) == [0]
    assert sampled_indices(3, 1.0, 8.0, 16) == [0, 1, 2]


def test_a_gif_is_decoded_with_its_rate_and_resampled(tmp_path):
    frames = clip(10)
    path = tmp_path / "clip.gif"
    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=100, loop=0)  # 10 fps
    video = load(str(path))
    assert video.indices == [0, 5] and video.source_fps == pytest.approx(10.0) and video.fps == pytest.approx(2.0)
    assert video.frames.shape == (2, 24, 24, 3) and video.frames[:, 0, 0, 0].tolist() == [0, 5]
    # 24 x 24 = 576 pixels is in [256, 2304]; sides are rounded to the factor 12: unchanged
    assert video.model_frames.shape == (2, 24, 24, 3)


def test_arrays_npy_files_frame_lists_and_mappings_give_the_same_frames(tmp_path):
    frames = clip(6)
    np.save(tmp_path / "clip.npy", frames)
    from_array = load(frames, max_frames=3)
    assert from_array.indices == [0, 2, 4] and from_array.fps == pytest.approx(1.0)  # taken at video_fps = 2
    for value in (str(tmp_path / "clip.npy"), list(frames), [Image.fromarray(f) for f in frames]):
        assert np.array_equal(load(value, max_frames=3).frames, from_array.frames)
    at_six = load({"frames": frames, "fps": 6.0})  # 1 s at 6 fps -> 2 frames at 2 fps
    assert at_six.indices == [0, 3] and at_six.fps == pytest.approx(2.0)
    args = {"row_index": 0, "column": "video", "video_fps": 2.0, "max_frames": 3, "factor": 12, **LIMITS}
    assert len(load_row_videos([frames, frames], **args)) == 2 and len(load_row_videos(list(frames), **args)) == 1


def test_bad_videos_name_the_row_column_and_fix(tmp_path):
    with pytest.raises(ValueError, match=r"row 0: the video array of column 'video' has shape \(4, 8, 8\)"):
        load(np.zeros((4, 8, 8), dtype=np.uint8))
    with pytest.raises(ValueError, match="does not exist"):
        load(str(tmp_path / "missing.gif"))
    try:
        import av  # noqa: F401
    except ImportError:
        (tmp_path / "clip.mp4").write_bytes(b"\0")
        with pytest.raises(ValueError, match="PyAV is not installed"):
            load(str(tmp_path / "clip.mp4"))


@pytest.fixture(scope="module")
def qwen3_vl():
    config = VLMPolicyConfig(
        model=tiny_model_dir("qwen3_vl"), max_new_tokens=4, temperature=3.0, max_frames=4, **LIMITS
    )
    return build_policy(config, "cpu")


def test_a_video_goes_through_the_processors_video_path_with_its_timestamps(qwen3_vl):
    rows = shapes_video_rows(2, 0, kinds=["frames"])
    rollout = qwen3_vl.rollout(rows, 2)
    ps = rollout.per_sample
    # 4 frames of 48 x 48 in 6-pixel patches: a grid of 2 frame pairs x 8 x 8 = 128 patches, 2 x 16 merged tokens
    assert [g.tolist() for g in ps["video_grid_thw"]] == [[[2, 8, 8]]] * 4
    assert all(p.shape == (128, 3 * 2 * 6 * 6) for p in ps["pixel_values_videos"])
    assert all(g.shape == (0, 3) for g in ps["image_grid_thw"])
    video_pad = qwen3_vl.hf_model.config.video_token_id
    types = ps["mm_token_type_ids"][0][ps["prompt_mask"][0] > 0]
    ids = ps["prompt_ids"][0][ps["prompt_mask"][0] > 0]
    assert (types == 2).sum() == 32 and torch.equal(types == 2, ids == video_pad)
    # Qwen3-VL writes each frame pair's mean time: (0 + 1) / 2 / 2 fps = 0.25 s -> "0.2", (2 + 3) / 2 / 2 = 1.25 s
    text = qwen3_vl.tokenizer.decode(ids)
    assert "<0.2 seconds>" in text and "<1.2 seconds>" in text
    assert video_pad not in ps["completion_ids"][rollout.action_mask > 0].tolist()
    for i, row in enumerate(rollout.rows):
        assert np.array_equal(row["video_frames"], rows[i // 2]["video"]["frames"]) and row["video_fps"] == 2.0
    with torch.no_grad():
        whole = qwen3_vl.score(rollout, ScoreRequest()).logp
        parts = [qwen3_vl.score(rollout.select(range(a, b)), ScoreRequest()).logp for a, b in ((0, 1), (1, 4))]
        blank = qwen3_vl.score(rollout, ScoreRequest.of("logp_without_image")).features["logp_without_image"]
    assert torch.equal(torch.cat(parts), whole), "a micro-batch gets each sample's own video patches"
    assert not torch.equal(blank, whole), "blanking the video changes the log-probs"


def test_llava_onevision_takes_a_video_as_stacked_frames_and_pooled_tokens():
    """4 frames resized to the tower's 32 x 32 input: ``pixel_values_videos`` ``[1, 4, 3, 32, 32]`` per sample; each
    frame's 4 x 4 features pooled 2 x 2 give 4 tokens, plus one row-end token: 17 ``<video>`` tokens."""
    config = VLMPolicyConfig(
        model=tiny_model_dir("llava_onevision"), max_new_tokens=4, temperature=3.0, max_frames=4, **LIMITS
    )
    policy = build_policy(config, "cpu")
    rollout = policy.rollout(shapes_video_rows(2, 0, kinds=["frames"]), 2)
    ps = rollout.per_sample
    assert all(v.shape == (1, 4, 3, 32, 32) for v in ps["pixel_values_videos"])
    assert all(p.shape[0] == 0 for p in ps["pixel_values"])
    ids = ps["prompt_ids"][0][ps["prompt_mask"][0] > 0]
    types = ps["mm_token_type_ids"][0][ps["prompt_mask"][0] > 0]
    video_token = policy.hf_model.config.video_token_index
    assert (ids == video_token).sum() == 17 and torch.equal(types == 2, ids == video_token)
    with torch.no_grad():
        whole = policy.score(rollout, ScoreRequest()).logp
        parts = [policy.score(rollout.select(range(a, b)), ScoreRequest()).logp for a, b in ((0, 1), (1, 4))]
        blank = policy.score(rollout, ScoreRequest.of("logp_without_image")).features["logp_without_image"]
    assert torch.equal(torch.cat(parts), whole), "a micro-batch gets each sample's own frames"
    assert not torch.equal(blank, whole), "blanking the video changes the log-probs"
    short = dict(shapes_video_rows(1, 1, kinds=["frames"])[0])
    short["video"] = dict(short["video"], frames=short["video"]["frames"][:2])
    with pytest.raises(ValueError, match=r"stacks the videos of a batch, but they have \[2, 4\] frames"):
        policy.rollout([shapes_video_rows(1, 0, kinds=["frames"])[0], short], 1)


def test_an_architecture_without_native_video_rejects_a_video_row():
    policy = build_policy(VLMPolicyConfig(model=tiny_model_dir("gemma3"), max_new_tokens=2, **LIMITS), "cpu")
    with pytest.raises(ValueError, match=r"row 0 has a video in column 'video' but this architecture takes no native"):
        policy.rollout(shapes_video_rows(1, 0), 1)


def frames_with(frames: np.ndarray, label: str) -> int:
    """How many of ``frames`` ``[F, H, W, 3]`` show a shape ``label`` (``"red circle"``), found by the detector."""
    return sum(any(shape.label == label for shape in detect(frame)) for frame in frames)


@pytest.mark.parametrize("model_type", ["qwen3_vl", "llava_onevision"])
def test_a_tiny_vlm_trains_on_native_video_with_a_reward_that_reads_the_frames(tmp_path, model_type):
    """The reward answers the question itself from the frames it receives (the shapes detector counts the frames
    showing the asked shape): those frames must be the clip's, at the policy's rate."""
    from genalign.trainer.recipe import train

    seen: list[tuple[tuple[int, ...], int, int]] = []

    def frame_count_reward(prompts, completions, video_frames, label, count, **columns):
        rewards = []
        for text, frames, asked, truth in zip(completions, video_frames, label, count, strict=True):
            from_frames = frames_with(frames, asked)
            seen.append((frames.shape, from_frames, truth))
            predicted = parse_count(answer_part(text) or "")
            rewards.append(float(predicted == from_frames))
        return rewards

    data = {"source": "procedural:shapes_video", "args": {"size": 16, "seed": 0, "kinds": ["frames"]}}
    config = {
        "policy": {"family": "vlm", "model": tiny_model_dir(model_type), "max_new_tokens": 4, "temperature": 3.0,
                   "freeze_vision_tower": True, "max_frames": 4, **LIMITS},
        "data": {"train": data},
        "algorithm": {"group_size": 2, "prompts_per_step": 2, "micro_batch_size": 2},
        "optim": {"lr": 1.0e-3},
        "eval": {"at_start": False},
        "run": {"seed": 0, "max_steps": 2, "output_dir": str(tmp_path / "run"), "save_every": 0, "sample_every": 0,
                "num_threads": 1, "progress_bar": False},
    }  # fmt: skip
    train(config, rewards=[frame_count_reward])
    assert len(seen) == 2 * 2 * 2, "2 steps x 2 prompts x 2 samples"
    assert all(shape == (4, 48, 48, 3) for shape, _, _ in seen)
    assert all(from_frames == truth for _, from_frames, truth in seen), "the frames the reward got are the clip's"
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 2


def test_rows_mix_images_videos_markers_and_chat_blocks(qwen3_vl):
    """A string prompt with a video then an image marker, an image-only row and a chat prompt with a video block:
    each sample keeps its own grids, and scores do not depend on the micro-batch split."""
    images, videos = shapes_vqa_rows(2, seed=0), shapes_video_rows(2, 0)
    chat = [{"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "video"}]}]
    rows = [
        dict(videos[0], image=images[0]["image"], prompt="<video> then <image>: how many?"),
        images[1],
        dict(videos[1], prompt=chat),
    ]
    rollout = qwen3_vl.rollout(rows, 2)
    ps = rollout.per_sample
    assert [g.tolist() for g in ps["video_grid_thw"][::2]] == [[[2, 8, 8]], [], [[2, 8, 8]]]
    assert [g.tolist() for g in ps["image_grid_thw"][::2]] == [[[1, 8, 8]], [[1, 8, 8]], []]
    types = ps["mm_token_type_ids"][0][ps["prompt_mask"][0] > 0].tolist()
    assert types.index(2) < types.index(1), "the video comes before the image, where the markers are"
    assert "video_frames" not in rollout.rows[2] and rollout.rows[4]["video_frames"].shape == (4, 48, 48, 3)
    with torch.no_grad():
        whole = qwen3_vl.score(rollout).logp
        parts = torch.cat([qwen3_vl.score(rollout.select(idx)).logp for idx in ([0], [1, 2], [3, 4, 5])])
    assert torch.equal(parts, whole)
