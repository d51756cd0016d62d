"""The committed VLM demo model loads offline as a Qwen2-VL and is only partly right (see its MODEL_CARD.md)."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from genalign.assets import resolve  # noqa: E402
from genalign.data.vlm_tasks import shapes_vqa_rows  # noqa: E402
from genalign.policies.vlm import VLMPolicyConfig, build_policy  # noqa: E402
from genalign.rewards import REWARDS  # noqa: E402

torch.set_num_threads(1)
# Held-out counting accuracy of samples at temperature 1, as measured by scripts/pretrain_demo_vlm.py and written to
# pretrain_metrics.json / MODEL_CARD.md (0.275); the band is where the demo leaves RL room to gain 20 points.
SAMPLED_COUNT_ACCURACY_RANGE = (0.15, 0.5)
#: The shapes world the demo model was trained on (scripts/pretrain_demo_vlm.py defaults).
WORLD = {"kinds": ["count"], "colors": ["red", "green", "blue"], "shape_kinds": ["circle", "square"]}


@pytest.fixture(scope="module")
def path():
    return resolve("builtin:shapes-vlm")


def test_files_are_small_and_complete(path):
    names = ["config.json", "model.safetensors", "tokenizer.json", "processor_config.json", "MODEL_CARD.md"]
    for name in [*names, "chat_template.jinja", "generation_config.json", "pretrain_metrics.json"]:
        assert (path / name).is_file(), name
    assert (path / "model.safetensors").stat().st_size < 8 * 2**20


def test_loads_offline_as_qwen2_vl(path):
    processor = transformers.AutoProcessor.from_pretrained(path)
    model = transformers.AutoModelForImageTextToText.from_pretrained(path)
    assert model.config.model_type == "qwen2_vl"
    assert type(processor).__name__ == "Qwen2VLProcessor"
    text = "<think>count the red circles</think><answer>2</answer>"
    ids = processor.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert processor.tokenizer.decode(ids) == text
    assert processor.image_processor.patch_size == model.config.vision_config.patch_size


def test_recorded_held_out_accuracy_is_partial_with_room_for_rl(path):
    held_out = json.loads((path / "pretrain_metrics.json").read_text())["held_out"]
    assert SAMPLED_COUNT_ACCURACY_RANGE[0] <= held_out["count/sampled"] <= SAMPLED_COUNT_ACCURACY_RANGE[1]
    assert held_out["count/pass@8"] >= 0.6  # a group of 8 usually holds a right answer: RL has a signal


def test_policy_samples_well_formed_partly_right_answers(path):
    policy = build_policy(
        VLMPolicyConfig(model="builtin:shapes-vlm", max_new_tokens=32, min_pixels=256, max_pixels=48 * 48), "cpu"
    )
    rows = shapes_vqa_rows(24, seed=11, split="eval", **WORLD)
    rollout = policy.rollout(rows, group_size=4, mode="eval")
    fmt = REWARDS.get("format_regex")()(None, rollout.outputs)
    assert sum(fmt) / len(fmt) >= 0.9
    counts = REWARDS.get("count_accuracy")()(None, rollout.outputs, count=[r["count"] for r in rollout.rows])
    accuracy = sum(counts) / len(counts)
    assert 0.05 <= accuracy <= 0.75, accuracy  # wide: 96 samples of a partly right model


def test_answers_depend_on_the_image(path):
    from PIL import Image

    processor = transformers.AutoProcessor.from_pretrained(path)
    model = transformers.AutoModelForImageTextToText.from_pretrained(path).eval()
    row = next(r for r in shapes_vqa_rows(8, seed=1, split="eval", **WORLD) if r["count"] >= 2)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": row["prompt"]}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    text += f"<think>count the {row['label']}s</think><answer>"
    probs = []
    for image in (row["image"], Image.new("RGB", (48, 48), (255, 255, 255))):
        batch = processor(text=[text], images=[[image]], return_tensors="pt")
        with torch.no_grad():
            probs.append(model(**batch).logits[0, -1].softmax(-1))
    assert (probs[0] - probs[1]).abs().max().item() > 0.05
