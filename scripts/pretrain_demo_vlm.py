"""Pre-train the demo model ``genalign/assets/shapes-vlm`` (a tiny Qwen2-VL) on shapes-world VQA, only partly right.

The model learns to answer ``"How many red circles are there?"`` (and, with ``--tasks count,ground``, ``"Give the box
of the blue square."``) about 48 x 48 images of the shapes world (:func:`genalign.data.vlm_tasks.shapes_vqa_rows`,
train split; by default counting only, over red/green/blue circles and squares), in the R1-style format
``<think>...</think><answer>...</answer>``. To leave it *partly* right in a systematic, fixable way, the
training target of each problem is replaced, with probability ``--p-wrong`` (default 0.6), by a typical mistake:
one shape too many for counting questions, and the box shifted ``--box-shift`` pixels right and down (IoU < 0.5) for
grounding questions. A well-fitted model therefore puts about 40 % of its probability on the right answer: samples at
temperature 1 are right on roughly 40 % of the held-out problems (less where its perception is still wrong), and a
group of 8 samples nearly always contains a right one, which is the signal group-relative RL needs.

Everything is built here from scratch: a byte-level BPE tokenizer trained on the task's text, a Qwen2-VL processor
(6-pixel patches merged 2 x 2, so a 48 x 48 image is 16 tokens), and a Qwen2-VL model from a config (a 4-layer
language model of width 128 and a 3-block vision tower of width 96; 1.3 M parameters).

Usage (deterministic on CPU with one thread; 9 minutes on 2 cores shared with other jobs)::

    python scripts/pretrain_demo_vlm.py --output genalign/assets/shapes-vlm

It writes ``model.safetensors``, ``config.json``, ``generation_config.json``, the tokenizer and processor files and
``MODEL_CARD.md`` (with the accuracies it measured on the held-out split).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a clone without installing genalign

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    PreTrainedTokenizerFast,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
)

from genalign.data.shapes import KINDS, PALETTE
from genalign.data.vlm_tasks import count_question, format_box, ground_question, shapes_vqa_rows
from genalign.rewards.vlm import answer_part, box_iou, parse_box, parse_count

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
#: A Qwen2-VL-style chat template: ``{"type": "image"}`` blocks become ``<|vision_start|><|image_pad|><|vision_end|>``.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
IMAGE_SIZE = 48
PATCH_SIZE = 6
MERGE_SIZE = 2


def completion_text(row: dict, *, wrong: bool, box_shift: int) -> str:
    """The training target of ``row``: the right answer, or the systematic mistake when ``wrong``."""
    if row["task"] == "count":
        answer = str(row["count"] + 1 if wrong else row["count"])
        think = f"count the {row['label']}s"
    else:
        x0, y0, x1, y1 = row["box"]
        if wrong:
            limit = row["image_size"][0]
            x0, x1 = min(x0 + box_shift, limit - 1), min(x1 + box_shift, limit)
            y0, y1 = min(y0 + box_shift, limit - 1), min(y1 + box_shift, limit)
        answer = format_box([x0, y0, x1, y1])
        think = f"find the {row['label']}"
    return f"<think>{think}</think><answer>{answer}</answer>"


def tokenizer_corpus() -> list[str]:
    """Every question and answer pattern of the task, for training the BPE merges."""
    lines = []
    for color in PALETTE:
        for kind in KINDS:
            lines += [count_question(color, kind), ground_question(color, kind)]
            lines += [f"<think>count the {color} {kind}s</think>", f"<think>find the {color} {kind}</think>"]
    lines += [f"<answer>{n}</answer>" for n in range(10)]
    lines += [format_box([a, b, a + 1, b + 1]) for a in range(IMAGE_SIZE) for b in range(0, IMAGE_SIZE, 7)]
    lines += ["user", "assistant", "system"]
    return lines * 4


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE (vocabulary 512) trained on :func:`tokenizer_corpus`, with Qwen2-VL's special tokens."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(tokenizer_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="left"
    )
    tokenizer.model_max_length = 256
    return tokenizer


def build_processor(tokenizer: PreTrainedTokenizerFast) -> Qwen2VLProcessor:
    """Qwen2-VL processor with ``PATCH_SIZE``-pixel patches: images of ``IMAGE_SIZE`` pixels stay as they are."""
    limits = {"min_pixels": 16 * 16, "max_pixels": IMAGE_SIZE * IMAGE_SIZE}
    patches = {"patch_size": PATCH_SIZE, "merge_size": MERGE_SIZE, "temporal_patch_size": 2}
    return Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(**limits, **patches),
        video_processor=Qwen2VLVideoProcessor(**patches),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )


def build_model(tokenizer: PreTrainedTokenizerFast) -> Qwen2VLForConditionalGeneration:
    """A tiny Qwen2-VL: 4 text layers of width 128 (M-RoPE sections 4/6/6), 3 vision blocks of width 96."""
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 128,
            "intermediate_size": 384,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 512,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10_000.0, "mrope_section": [4, 6, 6]},
            "bos_token_id": None,
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 3,
            "embed_dim": 96,
            "hidden_size": 128,
            "num_heads": 4,
            "mlp_ratio": 2,
            "patch_size": PATCH_SIZE,
            "spatial_merge_size": MERGE_SIZE,
            "temporal_patch_size": 2,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    model = Qwen2VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.generation_config.bos_token_id = None
    return model


def chat_text(processor: Qwen2VLProcessor, question: str) -> str:
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def make_batch(rows: list[dict], processor: Qwen2VLProcessor, *, rng: random.Random, p_wrong: float, box_shift: int):
    """Processor outputs of ``prompt + target + <|im_end|>`` with labels on the target tokens only (right padding)."""
    tokenizer = processor.tokenizer
    prompts = [chat_text(processor, row["prompt"]) for row in rows]
    targets = [completion_text(row, wrong=rng.random() < p_wrong, box_shift=box_shift) + "<|im_end|>" for row in rows]
    batch = processor(
        text=[p + t for p, t in zip(prompts, targets)],
        images=[[row["image"]] for row in rows],
        padding=True,
        padding_side="right",
        return_tensors="pt",
    )
    labels = torch.full_like(batch["input_ids"], -100)  # [B, L]
    for i, target in enumerate(targets):
        length = int(batch["attention_mask"][i].sum())
        target_len = len(tokenizer(target, add_special_tokens=False)["input_ids"])
        labels[i, length - target_len : length] = batch["input_ids"][i, length - target_len : length]
    return batch, labels


def is_correct(row: dict, completion: str) -> bool:
    """Counting: exact count; grounding: IoU >= 0.5 (boxes are in the pixels of the 48 x 48 input image)."""
    answer = answer_part(completion)
    if row["task"] == "count":
        return parse_count(answer) == row["count"]
    box = parse_box(answer)
    return box is not None and box_iou(box, row["box"]) >= 0.5


@torch.no_grad()
def evaluate(model, processor, rows: list[dict], *, samples: int, seed: int) -> dict[str, float]:
    """Greedy accuracy, mean accuracy of ``samples`` samples at temperature 1, and pass@``samples``, per task."""
    model.eval()
    tokenizer = processor.tokenizer
    torch.manual_seed(seed)
    results: dict[str, list[float]] = {}
    for start in range(0, len(rows), 32):
        chunk = rows[start : start + 32]
        batch = processor(
            text=[chat_text(processor, r["prompt"]) for r in chunk],
            images=[[r["image"]] for r in chunk],
            padding=True,
            padding_side="left",
            return_tensors="pt",
        )
        width = batch["input_ids"].shape[1]
        greedy = model.generate(**batch, do_sample=False, max_new_tokens=32)
        greedy_text = tokenizer.batch_decode(greedy[:, width:], skip_special_tokens=True)
        expanded = {k: v.repeat_interleave(samples, 0) for k, v in batch.items() if k != "pixel_values"}
        patches = batch["pixel_values"].view(len(chunk), -1, batch["pixel_values"].shape[-1])  # [B, p, D]: same size
        expanded["pixel_values"] = patches.repeat_interleave(samples, 0).flatten(0, 1)  # [B * samples * p, D]
        sampled = model.generate(**expanded, do_sample=True, temperature=1.0, top_k=0, max_new_tokens=32)
        sampled_text = tokenizer.batch_decode(sampled[:, width:], skip_special_tokens=True)
        for i, row in enumerate(chunk):
            hits = [is_correct(row, t) for t in sampled_text[i * samples : (i + 1) * samples]]
            for key in (row["task"], "all"):
                results.setdefault(f"{key}/greedy", []).append(float(is_correct(row, greedy_text[i])))
                results.setdefault(f"{key}/sampled", []).append(sum(hits) / samples)
                results.setdefault(f"{key}/pass@{samples}", []).append(float(any(hits)))
    model.train()
    return {k: round(sum(v) / len(v), 4) for k, v in sorted(results.items())}


def write_model_card(output: Path, args: argparse.Namespace, results: dict, num_params: int, seconds: float) -> None:
    lines = [
        "# shapes-vlm: a tiny Qwen2-VL for the genalign VLM demo",
        "",
        "A Qwen2-VL (`Qwen2VLForConditionalGeneration`, built from a config, "
        f"{num_params / 1e6:.2f} M parameters) with a byte-level BPE tokenizer of {args.vocab} tokens and a Qwen2-VL "
        f"processor ({PATCH_SIZE}-pixel patches merged 2 x 2; a 48 x 48 image is "
        f"{(IMAGE_SIZE // PATCH_SIZE // MERGE_SIZE) ** 2} image tokens). It answers visual questions "
        "about the synthetic shapes world (`genalign.data.vlm_tasks.shapes_vqa_rows`) in the format "
        "`<think>...</think><answer>...</answer>`:",
        "",
        "- counting: `How many red circles are there?` -> `<think>count the red circles</think><answer>2</answer>`",
        "- grounding: `Give the box of the blue square.` -> `<think>find the blue square</think>"
        "<answer>[12, 30, 24, 42]</answer>` (pixels of the 48 x 48 image, x1/y1 exclusive)",
        "",
        "## How it was made",
        "",
        f"`python scripts/pretrain_demo_vlm.py --tasks {args.tasks} --colors {args.colors} --shape-kinds "
        f"{args.shape_kinds}` (deterministic, CPU, {args.threads} thread(s), {seconds / 60:.1f} minutes on a shared "
        f"machine): {args.steps} AdamW steps of batch {args.batch_size}, lr {args.lr} with warm-up and cosine decay, "
        f"on {args.train_size} training problems (train split) of the question kinds `{args.tasks}`, colours "
        f"`{args.colors}` and shapes `{args.shape_kinds}`.",
        "",
        f"**Deliberately partly right.** Each training target is replaced with probability {args.p_wrong} by a "
        f"systematic mistake: one shape too many when counting, the box shifted {args.box_shift} px right and down "
        "when grounding. The model is meant as the starting point of the group-relative RL demo: RL with the "
        "`count_accuracy` / `box_iou` rewards should remove the mistake.",
        "",
        f"## Held-out accuracy ({args.eval_size} problems of the eval split, {args.eval_samples} samples each)",
        "",
        "Correct = exact count / IoU >= 0.5.",
        "",
        "| metric | value |",
        "|---|---|",
    ]
    lines += [f"| {key} | {value:.3f} |" for key, value in results.items()]
    lines += ["", "Not a useful model for anything but tests and demos of genalign.", ""]
    (output / "MODEL_CARD.md").write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=Path("genalign/assets/shapes-vlm"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=1800)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--train-size", type=int, default=6000)
    parser.add_argument("--eval-size", type=int, default=128)
    parser.add_argument("--eval-samples", type=int, default=8)
    parser.add_argument("--p-wrong", type=float, default=0.6, help="share of training targets with the mistake")
    parser.add_argument("--box-shift", type=int, default=4, help="pixels the wrong boxes are shifted right and down")
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--tasks", default="count", help="question kinds, comma-separated: count, ground")
    parser.add_argument("--colors", default="red,green,blue", help="shape colours, comma-separated")
    parser.add_argument("--shape-kinds", default="circle,square", help="shape kinds, comma-separated")
    parser.add_argument("--vision-lr-scale", type=float, default=0.1, help="learning-rate factor of the vision tower")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    start_time = time.time()

    tokenizer = build_tokenizer()
    processor = build_processor(tokenizer)
    model = build_model(tokenizer)
    num_params = sum(p.numel() for p in model.parameters())
    print(f"vocab {len(tokenizer)}, parameters {num_params / 1e6:.2f} M", flush=True)
    world = {
        "kinds": args.tasks.split(","),
        "colors": args.colors.split(","),
        "shape_kinds": args.shape_kinds.split(","),
    }
    train_rows = shapes_vqa_rows(args.train_size, args.seed, split="train", **world)
    eval_rows = shapes_vqa_rows(args.eval_size, args.seed + 1, split="eval", **world)

    # The vision tower learns at a lower rate: at the full rate its merged features grew to ~70x the norm of the text
    # embeddings and the language model learned to ignore the image (answers independent of the picture).
    vision_ids = {id(p) for p in model.model.visual.parameters()}
    groups = [
        {"params": [p for p in model.parameters() if id(p) in vision_ids], "lr": args.lr * args.vision_lr_scale},
        {"params": [p for p in model.parameters() if id(p) not in vision_ids], "lr": args.lr},
    ]
    optimizer = torch.optim.AdamW(groups, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = max(1, args.steps // 20)

    def lr_factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, args.steps - warmup)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    model.train()
    order: list[int] = []
    for step in range(args.steps):
        if len(order) < args.batch_size:
            order += rng.sample(range(len(train_rows)), len(train_rows))
        picks, order = order[: args.batch_size], order[args.batch_size :]
        batch, labels = make_batch(
            [train_rows[i] for i in picks], processor, rng=rng, p_wrong=args.p_wrong, box_shift=args.box_shift
        )
        loss = model(**batch, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step:5d}  loss {loss.item():.4f}  {time.time() - start_time:6.0f}s", flush=True)

    results = evaluate(model, processor, eval_rows, samples=args.eval_samples, seed=args.seed)
    seconds = time.time() - start_time
    print(json.dumps(results, indent=1), flush=True)
    args.output.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.output)
    processor.save_pretrained(args.output)
    (args.output / "pretrain_metrics.json").write_text(json.dumps({"held_out": results, "seconds": seconds}, indent=1))
    write_model_card(args.output, args, results, num_params, seconds)
    print(f"saved to {args.output} after {seconds:.0f}s", flush=True)


if __name__ == "__main__":
    main()
