"""Trackers: a missing one is an error at load; TensorBoard receives the config, every step, every evaluation and
samples (read back from the event file)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from genalign.config import ConfigError
from genalign.trainer import train
from tests.reliability.conftest import toy_config, toy_family  # noqa: F401  (the toy policy family)


def events(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = sorted(run_dir.rglob("events.out.tfevents.*"), key=lambda p: len(p.parts))  # hparams write a sub-run
    assert files, f"no event file under {run_dir}"
    accumulator = EventAccumulator(str(files[0].parent), size_guidance={"tensors": 0, "images": 0, "scalars": 0})
    accumulator.Reload()
    return accumulator


def test_tensorboard_receives_config_steps_evaluations_and_samples(tmp_path, toy_family):  # noqa: F811
    pytest.importorskip("tensorboard")
    config = toy_config(tmp_path, run={"max_steps": 4, "trackers": ["tensorboard"], "sample_every": 2})
    config.data.eval = config.data.train
    config.eval.every = 2
    train(config)
    accumulator = events(tmp_path / "run")
    scalars = accumulator.Tags()["scalars"]
    assert "reward/mean" in scalars and "eval/accuracy" in scalars and "loss" in scalars
    assert [e.step for e in accumulator.Scalars("reward/mean")] == [1, 2, 3, 4]
    assert [e.step for e in accumulator.Scalars("eval/accuracy")] == [2, 4]
    texts = accumulator.Tags()["tensors"]
    assert any(t.startswith("config") for t in texts) and any(t.startswith("samples") for t in texts)


def test_images_go_to_tensorboard_as_images(tmp_path):
    pytest.importorskip("tensorboard")
    from accelerate import Accelerator

    from genalign.trainer.trackers import Trackers

    accelerator = Accelerator(cpu=True, log_with=["tensorboard"], project_dir=str(tmp_path))
    trackers = Trackers(accelerator, ["tensorboard"])
    trackers.start({"run": {"seed": 0}})
    image = Image.fromarray(np.full((8, 8, 3), 200, dtype=np.uint8))
    trackers.samples(3, ["a red square"], [image], [0.5])
    trackers.end()
    assert events(tmp_path).Tags()["images"] == ["samples/0"]


def test_a_tracker_that_is_not_installed_names_the_extra(tmp_path):
    with pytest.raises(
        ConfigError, match=r"'wandb' package is not installed; install it with pip install 'genalign\[wandb\]'"
    ):
        toy_config(tmp_path, run={"trackers": ["wandb"]})


def test_videos_go_to_tensorboard_as_animated_gifs_at_their_fps(tmp_path):
    pytest.importorskip("tensorboard")
    from io import BytesIO

    from accelerate import Accelerator

    from genalign.trainer.trackers import Trackers

    accelerator = Accelerator(cpu=True, log_with=["tensorboard"], project_dir=str(tmp_path))
    trackers = Trackers(accelerator, ["tensorboard"])
    trackers.start({"run": {"seed": 0}})
    video = np.zeros((5, 8, 12, 3), dtype=np.uint8)
    for f in range(5):
        video[f, :, 2 * f : 2 * f + 2] = 255
    with pytest.raises(ValueError, match=r"video samples need their frames per second"):
        trackers.samples(3, ["a moving bar"], [video], [0.5])
    trackers.samples(3, ["a moving bar"], [video], [0.5], fps=10)
    trackers.end()
    accumulator = events(tmp_path)
    assert accumulator.Tags()["images"] == ["sample_videos/0"]
    (event,) = accumulator.Images("sample_videos/0")
    with Image.open(BytesIO(event.encoded_image_string)) as gif:
        assert (event.step, gif.format, gif.n_frames, gif.size, gif.info["duration"]) == (3, "GIF", 5, (12, 8), 100)


def test_videos_go_to_wandb_as_video_files_and_samples_dump_them(tmp_path, monkeypatch):
    """W&B receives each video as ``wandb.Video`` of a file it copies when logged (a stand-in module records it);
    the sample dump writes the same clip and refuses a video without its fps."""
    import sys
    from types import SimpleNamespace

    from genalign.trainer.metrics import dump_samples
    from genalign.trainer.trackers import Trackers
    from genalign.video_files import read_video

    received: dict = {}

    class Video:
        def __init__(self, path, fps, format):
            received["video"] = (read_video(path, fps=fps), fps, format)  # read now: the file is temporary

    wandb = SimpleNamespace(Video=Video, Image=lambda image: image, Table=lambda columns, data: (columns, data))
    run = SimpleNamespace(log=lambda logged, step: received.update(logged=logged, step=step))
    accelerator = SimpleNamespace(get_tracker=lambda name, unwrap: run)
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    video = np.zeros((3, 8, 8, 3), dtype=np.uint8)
    video[1:, 2:6, 2:6] = 255
    Trackers(accelerator, ["wandb"]).samples(5, ["a square"], [video], [1.0], fps=6)
    frames, fps, form = received["video"]
    assert (frames.shape, fps, received["step"]) == ((3, 8, 8, 3), 6, 5) and form in ("mp4", "gif")
    assert received["logged"]["samples"] == (["prompt", "output", "reward"], [["a square", "video [3, 8, 8, 3]", 1.0]])
    dump_samples(tmp_path, 5, ["a square"], [video], [1.0], 1, fps=6)
    (record,) = [json.loads(line) for line in (tmp_path / "step-5.jsonl").read_text().splitlines()]
    assert record["fps"] == 6 and read_video(tmp_path / record["output"], fps=6).shape == (3, 8, 8, 3)
    with pytest.raises(ValueError, match=r"a video sample needs its frames per second"):
        dump_samples(tmp_path, 6, ["a square"], [video], [1.0], 1)
