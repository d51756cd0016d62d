"""The committed editing models load offline as StableDiffusion3Pipelines and edit held-out rows as image-to-image
(sd3_img2img at strength 0.6): genalign/assets/shapes-edit partly right and better than the text-to-image model it was
made from; genalign/assets/shapes-edit-weak (the editing demo's model) with its planted flaw, edits applied only part
of the way."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from genalign.assets import resolve  # noqa: E402
from genalign.data.shapes_edit import applied_fraction, shapes_edit_rows  # noqa: E402
from genalign.pipelines.flow import FlowLogProbPipeline  # noqa: E402
from genalign.rewards.image_edit import ShapesEdit  # noqa: E402

torch.set_num_threads(1)
ROWS = shapes_edit_rows(32, 1234, split="eval")


@functools.cache
def edits(name: str) -> tuple:
    """``builtin:name``'s edits of ``ROWS``, one ODE sample per row (PIL images)."""
    pipe = diffusers.StableDiffusion3Pipeline.from_pretrained(
        resolve(f"builtin:{name}"), text_encoder_3=None, tokenizer_3=None
    )
    pipe.set_progress_bar_config(disable=True)
    sampler = FlowLogProbPipeline(pipe, architecture="sd3_img2img", strength=0.6)
    prompts, sources = [r["prompt"] for r in ROWS], [r["image"] for r in ROWS]
    out = sampler(prompts, source_images=sources, num_inference_steps=10, guidance_scale=1.0, height=32, width=32,
                  max_sequence_length=1, noise_level=0.0, generator=torch.Generator().manual_seed(0))  # fmt: skip
    return tuple(out.outputs)


def accuracy(name: str) -> float:
    """Held-out edit accuracy (colours and places) of ``builtin:name``."""
    prompts, sources = [r["prompt"] for r in ROWS], [r["image"] for r in ROWS]
    scores = ShapesEdit(match_kind=False)(prompts, list(edits(name)), edit=[r["edit"] for r in ROWS], image=sources)
    return float(np.mean(scores))


@pytest.mark.parametrize("name", ["shapes-edit", "shapes-edit-weak"])
def test_files_are_small_and_complete(name):
    path = resolve(f"builtin:{name}")
    for file in ["model_index.json", "MODEL_CARD.md", "pretrain_report.json", "scheduler/scheduler_config.json"]:
        assert (path / file).is_file(), file
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    assert total < 4 * 2**20, f"{total} bytes"


def test_edits_held_out_rows_partly_right_and_better_than_the_text_to_image_model():
    edited, base = accuracy("shapes-edit"), accuracy("shapes-t2i")
    assert 0.05 <= edited <= 0.6, edited  # room for reinforcement learning to gain
    assert edited > base + 0.05, (edited, base)


def test_the_weak_model_under_edits():
    weak, full = (applied_fraction(list(edits(name)), ROWS) for name in ("shapes-edit-weak", "shapes-edit"))
    # measured 0.286 and 0.359: shapes-edit falls short too (missing edits, dissolved shapes), the weak model more
    assert weak < full - 0.04, (weak, full)  # trained on targets 0.4 of the way (its model card)
    assert 0.15 < weak < 0.5, weak
