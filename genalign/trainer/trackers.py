"""Experiment trackers (TensorBoard, Weights & Biases) through accelerate: the resolved config, every step's metrics,
every evaluation, and sample outputs (images, or prompt/output/reward tables for text) go to every tracker.

A requested tracker that is not installed is an error at config load (``run.trackers``), never a run that silently
logs nothing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from genalign.video_files import as_video, gif_bytes, is_video, write_video


def flat_scalars(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``a.b.c -> value`` for the scalar leaves of a nested config (the form trackers take as hyper-parameters)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat |= flat_scalars(value, f"{name}.")
        elif isinstance(value, bool | int | float | str):
            flat[name] = value
        elif value is not None:
            flat[name] = str(value)
    return flat


def describe(output: Any) -> str:
    """A table cell for an output that is not text: ``video [F, H, W, 3]``, ``image 64x64``, else its type."""
    if is_video(output):
        return f"video {list(output.shape)}"
    if hasattr(output, "size") and hasattr(output, "convert"):
        return f"image {output.size[0]}x{output.size[1]}"
    return type(output).__name__


def add_tensorboard_video(writer: Any, tag: str, video: np.ndarray, step: int, *, fps: int) -> None:
    """``video`` ``[F, H, W, 3]`` uint8 as TensorBoard's video summary: an image summary holding an animated GIF
    (what ``SummaryWriter.add_video`` writes, built here with Pillow rather than moviepy, which it needs)."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    _, height, width, channels = video.shape
    image = Summary.Image(
        height=height, width=width, colorspace=channels, encoded_image_string=gif_bytes(video, fps=fps)
    )
    writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)


class Trackers:
    """The run's trackers (``run.trackers``), on the main process."""

    def __init__(self, accelerator: Any, names: list[str]) -> None:
        self.accelerator = accelerator
        self.names = list(names)

    def start(self, config: dict[str, Any]) -> None:
        """Start the trackers with the resolved config (hyper-parameters, and the YAML as text)."""
        if not self.names:
            return
        self.accelerator.init_trackers("genalign", config=flat_scalars(config))
        self._text("config", "```yaml\n" + yaml.safe_dump(config, sort_keys=False) + "```", step=0)

    def log(self, record: dict[str, Any], step: int) -> None:
        """Numbers of a step record or an evaluation."""
        if self.names:
            self.accelerator.log({k: v for k, v in record.items() if isinstance(v, int | float)}, step=step)

    def samples(
        self, step: int, prompts: list[str], outputs: list[Any], rewards: list[float], *, fps: int | None = None
    ) -> None:
        """Sample outputs: images as images, videos (``[F, H, W, 3]`` uint8, shown at ``fps``) as videos, and every
        sample in a prompt / output / reward table."""
        if not self.names or not outputs:
            return
        images = [np.asarray(o.convert("RGB")) for o in outputs if hasattr(o, "convert")]
        videos = [as_video(o) for o in outputs if is_video(o)]
        if videos and fps is None:
            raise ValueError(
                "video samples need their frames per second: the policy declares it as rollout.info['fps']"
            )
        rows = [[p, o if isinstance(o, str) else describe(o), r] for p, o, r in zip(prompts, outputs, rewards)]
        if "tensorboard" in self.names:
            writer = self.accelerator.get_tracker("tensorboard", unwrap=True)
            for i, image in enumerate(images):
                writer.add_image(f"samples/{i}", image, step, dataformats="HWC")
            for i, video in enumerate(videos):
                add_tensorboard_video(writer, f"sample_videos/{i}", video, step, fps=fps)
            table = "| prompt | output | reward |\n|---|---|---|\n" + "".join(
                f"| {p} | {o} | {r:.4g} |\n" for p, o, r in rows
            )
            writer.add_text("samples", table, step)
        if "wandb" in self.names:
            import wandb

            run = self.accelerator.get_tracker("wandb", unwrap=True)
            logged: dict[str, Any] = {"samples": wandb.Table(columns=["prompt", "output", "reward"], data=rows)}
            if images:
                logged["sample_images"] = [wandb.Image(image) for image in images]
            with tempfile.TemporaryDirectory() as folder:  # wandb copies a media file when it is logged
                if videos:
                    files = [write_video(v, Path(folder) / f"sample-{i}", fps=fps) for i, v in enumerate(videos)]
                    logged["sample_videos"] = [wandb.Video(str(f), fps=fps, format=f.suffix[1:]) for f in files]
                run.log(logged, step=step)

    def _text(self, tag: str, text: str, step: int) -> None:
        if "tensorboard" in self.names:
            self.accelerator.get_tracker("tensorboard", unwrap=True).add_text(tag, text, step)
        if "wandb" in self.names:
            self.accelerator.get_tracker("wandb", unwrap=True).summary[tag] = text

    def end(self) -> None:
        if self.names:
            self.accelerator.end_training()
