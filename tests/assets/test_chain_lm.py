"""The multi-step demo model ``builtin:chain-lm`` loads offline, is only partly right, marks one segment per step line,
and its preset (configs/demo_chain_grpo.yaml) trains for a step (see the model's MODEL_CARD.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from genalign.assets import resolve  # noqa: E402
from genalign.config import load_config  # noqa: E402
from genalign.data.chains import arithmetic_chain, grade_chain, solution_text  # noqa: E402
from genalign.policies.lm.segments import SegmentBoundaries  # noqa: E402
from genalign.trainer import train  # noqa: E402

PRESET = Path(__file__).resolve().parents[2] / "configs" / "demo_chain_grpo.yaml"
# MODEL_CARD.md: greedy held-out accuracy 0.49 on 500 prompts; wide bounds for 64 prompts (binomial sd ~0.063)
GREEDY_RANGE = (0.25, 0.72)


@pytest.fixture(scope="module")
def demo():
    path = resolve("builtin:chain-lm")
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    return model, tokenizer


def test_files_are_small_and_complete():
    path = resolve("builtin:chain-lm")
    for name in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "MODEL_CARD.md"]:
        assert (path / name).is_file(), name
    assert (path / "model.safetensors").stat().st_size < 8 * 2**20


def test_tokenizer_round_trip_and_one_segment_per_step(demo):
    _, tokenizer = demo
    prompt = "37+45-18+26+55\n"
    text = solution_text(prompt)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text) and tokenizer.decode(ids) == text  # one token per character
    ids = torch.tensor([ids])
    segments = SegmentBoundaries(tokenizer)(ids, torch.ones_like(ids))[0]
    lines = text.split("\n")
    expected = [k for k, line in enumerate(lines) for _ in line + "\n"][: len(text)]
    assert segments.tolist() == expected  # the newline closes its step's segment


def test_greedy_accuracy_is_partial(demo):
    model, tokenizer = demo
    rows = arithmetic_chain(64, seed=7, split="eval")
    encoded = tokenizer([r["prompt"] for r in rows], return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        output = model.generate(
            **encoded, max_new_tokens=96, do_sample=False, pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )  # fmt: skip
    texts = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    grades = [grade_chain(r["prompt"], t) for r, t in zip(rows, texts, strict=True)]
    accuracy = sum(g.correct for g in grades) / len(rows)
    assert GREEDY_RANGE[0] <= accuracy <= GREEDY_RANGE[1], accuracy
    assert all(g.answered for g in grades)  # the format is learnt; the late carries are not
    assert sum(g.steps_right >= 2 for g in grades) / len(rows) > 0.9  # the first two steps are (almost) always right


def test_the_preset_trains_one_step(tmp_path):
    config = load_config(
        PRESET,
        [
            f"run.output_dir={tmp_path / 'run'}", "run.max_steps=1", "run.progress_bar=false", "run.num_threads=1",
            "run.save_every=0", "run.sample_every=0", "algorithm.prompts_per_step=2", "algorithm.micro_batch_size=8",
            "eval.num_prompts=4", "eval.batch_size=4",
        ],
    )  # fmt: skip
    result = train(config)
    assert result["eval/num_scored"] == 4 and 0.0 <= result["eval/accuracy"] <= 1.0
    assert 0.0 <= result["eval/reward/progress"] <= 1.0
