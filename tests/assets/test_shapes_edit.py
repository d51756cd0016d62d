"""The committed editing demo model (genalign/assets/shapes-edit) loads offline as a StableDiffusion3Pipeline, edits
held-out rows as image-to-image (sd3_img2img at strength 0.6) partly right, and better than the text-to-image model it
was made from."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from genalign.assets import resolve  # noqa: E402
from genalign.data.shapes_edit import shapes_edit_rows  # noqa: E402
from genalign.pipelines.flow import FlowLogProbPipeline  # noqa: E402
from genalign.rewards.image_edit import ShapesEdit  # noqa: E402

torch.set_num_threads(1)
ROWS = shapes_edit_rows(32, 1234, split="eval")


def accuracy(name: str) -> float:
    """Held-out edit accuracy (colours and places) of ``builtin:name``, one ODE sample per row."""
    pipe = diffusers.StableDiffusion3Pipeline.from_pretrained(
        resolve(f"builtin:{name}"), text_encoder_3=None, tokenizer_3=None
    )
    pipe.set_progress_bar_config(disable=True)
    sampler = FlowLogProbPipeline(pipe, architecture="sd3_img2img", strength=0.6)
    prompts, sources = [r["prompt"] for r in ROWS], [r["image"] for r in ROWS]
    out = sampler(prompts, source_images=sources, num_inference_steps=10, guidance_scale=1.0, height=32, width=32,
                  max_sequence_length=1, noise_level=0.0, generator=torch.Generator().manual_seed(0))  # fmt: skip
    scores = ShapesEdit(match_kind=False)(prompts, out.outputs, edit=[r["edit"] for r in ROWS], image=sources)
    return float(np.mean(scores))


def test_files_are_small_and_complete():
    path = resolve("builtin:shapes-edit")
    for name in ["model_index.json", "MODEL_CARD.md", "pretrain_report.json", "scheduler/scheduler_config.json"]:
        assert (path / name).is_file(), name
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    assert total < 4 * 2**20, f"{total} bytes"


def test_edits_held_out_rows_partly_right_and_better_than_the_text_to_image_model():
    edited, base = accuracy("shapes-edit"), accuracy("shapes-t2i")
    assert 0.05 <= edited <= 0.6, edited  # room for reinforcement learning to gain
    assert edited > base + 0.05, (edited, base)
