"""Wan2.2 (two experts) and Wan2.2 TI2V-5B train 2 steps from YAML on their tiny models: the first ratio is exactly 1,
rewards read the declared fps, samples are written as playable videos (decoded back: frame count and size) and logged
to TensorBoard as videos, and the LoRA of both experts loads into diffusers' WanPipeline."""

from __future__ import annotations

import json
from io import BytesIO
from pathlib import Path

import pytest
import torch
from PIL import Image

from genalign.config import load_config
from genalign.trainer import train
from genalign.video_files import read_video
from tests.trainer.test_trackers import events

CONFIG = """
policy:
  family: flow
  model: {model}
  architecture: auto
  height: {size}
  width: {size}
  num_frames: 5
  fps: 8
  num_steps: 4
  eval_num_steps: 2
  guidance_scale: 2.0
  max_sequence_length: 8
  lora: {{rank: 4, alpha: 8.0}}
  sample_batch_size: 4
data:
  train: {{source: prompts.jsonl}}
rewards:
  - {{fn: shape_motion, args: {{speed: 0.5}}}}
  - {{fn: video_frames, name: compressible, args: {{reward: jpeg_compressibility}}}}
algorithm: {{group_size: 2, prompts_per_step: 2, micro_batch_size: 4, inner_epochs: 1}}
optim: {{lr: 1.0e-3}}
eval: {{at_start: false}}
run: {{output_dir: run, max_steps: 2, save_every: 2, sample_every: 1, samples_per_dump: 2, num_threads: 1,
       progress_bar: false, dashboard: false, trackers: [tensorboard]}}
"""
PROMPTS = [{"prompt": "a red square moving right", "direction": "right"},
           {"prompt": "a blue circle moving up", "direction": "up"}]  # fmt: skip
SIZES = {"wan22": 16, "wan22_ti2v": 32}  # TI2V-5B's VAE: 16 px per latent, 2 x 2 patches


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny_wan22")
    return {name: save_tiny_pipeline(name, root / name) for name in SIZES}


@pytest.fixture(scope="module")
def runs(tiny_models, tmp_path_factory):
    """The run folder of a 2-step training from YAML of each architecture."""
    return {name: _train(tmp_path_factory.mktemp(name), tiny_models[name], SIZES[name]) for name in SIZES}


def _train(folder: Path, model: Path, size: int) -> Path:
    (folder / "prompts.jsonl").write_text("".join(json.dumps(row) + "\n" for row in PROMPTS))
    (folder / "config.yaml").write_text(CONFIG.format(model=model, size=size))
    train(load_config(folder / "config.yaml"))
    return folder / "run"


@pytest.mark.parametrize("architecture", list(SIZES))
def test_two_steps_from_yaml_have_exact_first_ratios_and_rewards_read_the_fps(architecture, runs):
    records = [json.loads(line) for line in (runs[architecture] / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["ratio_min"] == r["ratio_max"] == 1.0 for r in records)  # one update per step: first ratios only
    assert all(r["rollout/fps"] == 8 and r["reward/shape_motion/errors"] == 0 for r in records)


@pytest.mark.parametrize("architecture", list(SIZES))
def test_samples_are_playable_videos_and_go_to_tensorboard_as_videos(architecture, runs):
    run, size = runs[architecture], SIZES[architecture]
    dumped = [json.loads(line) for line in (run / "samples" / "step-2.jsonl").read_text().splitlines()]
    assert [d["fps"] for d in dumped] == [8, 8]
    assert read_video(run / "samples" / dumped[0]["output"], fps=8).shape == (5, size, size, 3)
    accumulator = events(run)
    assert accumulator.Tags()["images"] == ["sample_videos/0", "sample_videos/1"]
    logged = accumulator.Images("sample_videos/0")[-1]
    with Image.open(BytesIO(logged.encoded_image_string)) as gif:
        assert (logged.step, gif.format, gif.size) == (2, "GIF", (size, size))


def test_the_lora_of_both_experts_loads_into_diffusers(tiny_models, runs):
    from diffusers import WanPipeline
    from safetensors.torch import load_file

    weights = runs["wan22"] / "checkpoints" / "step-2" / "policy"
    high = load_file(weights / "pytorch_lora_weights.safetensors")
    low = load_file(weights / "transformer_2" / "pytorch_lora_weights.safetensors")
    assert set(high) == set(low) and any(not torch.equal(high[k], low[k]) for k in high)  # two trained adapters
    pipe = WanPipeline.from_pretrained(tiny_models["wan22"])
    pipe.load_lora_weights(weights)
    pipe.load_lora_weights(weights / "transformer_2", load_into_transformer_2=True)
    for module, saved in ((pipe.transformer, high), (pipe.transformer_2, low)):
        loaded = dict(module.named_parameters())["blocks.0.attn1.to_q.lora_B.default_0.weight"]
        assert torch.equal(loaded, saved["transformer.blocks.0.attn1.to_q.lora_B.weight"])


def test_genalign_sample_scores_and_writes_videos_at_the_declared_fps(runs, tmp_path, capsys):
    """``genalign sample --score`` on the trained run: the video reward gets the policy's fps (it raises without it)
    and the clip is written at that rate."""
    from genalign.cli import main

    out = tmp_path / "samples"
    assert main(["sample", str(runs["wan22"]), "--score", "--num-prompts", "1", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    (line,) = [json.loads(text) for text in captured.out.splitlines()]
    assert line["rewards"]["shape_motion"] is not None and "could not score" not in captured.err
    clip = Path(line["output"]["mp4" if "mp4" in line["output"] else "gif"])
    assert read_video(clip, fps=8).shape == (5, 16, 16, 3)
