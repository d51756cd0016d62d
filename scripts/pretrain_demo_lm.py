"""Pre-train the demo model ``genalign/assets/arith-lm`` (a tiny Llama) on 3-digit addition, only partly right.

The model learns ``"123+456="`` -> ``"579<eos>"`` from the ``arithmetic`` procedural task (train split). To leave it
*partly* right in a realistic, fixable way, the training targets of problems that need a carry are replaced, with
probability ``--forget-carry`` (default 0.6), by the "forgot to carry" answer (``58+67`` -> ``115``; see
:func:`genalign.data.procedural.no_carry_sum`). A well-fitted model therefore answers carry-free problems correctly and
puts about 40 % of its probability on the right answer of the others: greedy decoding is right on roughly a third of
the held-out problems, while 8 samples at temperature 1 contain the right answer for almost every problem, which is the
signal group-relative RL needs.

Usage (deterministic on CPU for a fixed --threads; about 4 minutes on an idle core, 3000 steps of ~0.08 s)::

    python scripts/pretrain_demo_lm.py --output genalign/assets/arith-lm

It writes ``model.safetensors``, ``config.json``, ``generation_config.json``, the tokenizer files and ``MODEL_CARD.md``
(with the accuracies it measured on the held-out split).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a clone without installing genalign

import torch
from tokenizers import Tokenizer, decoders, models
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from genalign.data.procedural import arithmetic, no_carry_sum

SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>"]
CHARACTERS = list("0123456789+-*= ")


def build_tokenizer(characters: list[str] = CHARACTERS, *, max_length: int = 64) -> PreTrainedTokenizerFast:
    """A character-level tokenizer: one token per character of ``characters`` (default ``0-9 + - * = space``) plus
    ``<pad> <eos> <unk>``."""
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS + characters)}
    # BPE without merges and without a pre-tokenizer splits any string into single characters.
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()  # join characters without spaces when decoding
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>", padding_side="left"
    )
    tokenizer.model_max_length = max_length
    return tokenizer


def build_model(vocab_size: int, *, pad_id: int, eos_id: int, max_positions: int = 64) -> LlamaForCausalLM:
    """A 4-layer Llama with hidden size 128 (about 0.8 M parameters), positions up to ``max_positions``."""
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=max_positions,
        rope_theta=10_000.0,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config)


def needs_carry(a: int, b: int) -> bool:
    return no_carry_sum(a, b) != a + b


def make_batch(
    rows: list[dict], tokenizer: PreTrainedTokenizerFast, *, rng: random.Random, forget_carry: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``[B, L]`` and labels ``[B, L]`` (``-100`` on prompt and padding) for one training batch."""
    sequences, prompt_lengths = [], []
    for row in rows:
        a, b = row["a"], row["b"]
        answer = int(row["answer"])
        if needs_carry(a, b) and rng.random() < forget_carry:
            answer = no_carry_sum(a, b)
        prompt_ids = tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(str(answer), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        sequences.append(prompt_ids + answer_ids)
        prompt_lengths.append(len(prompt_ids))
    length = max(len(s) for s in sequences)
    input_ids = torch.full((len(rows), length), tokenizer.pad_token_id, dtype=torch.long)  # [B, L], right-padded
    labels = torch.full((len(rows), length), -100, dtype=torch.long)  # [B, L]
    for i, (sequence, prompt_length) in enumerate(zip(sequences, prompt_lengths, strict=True)):
        input_ids[i, : len(sequence)] = torch.tensor(sequence)
        labels[i, prompt_length : len(sequence)] = torch.tensor(sequence[prompt_length:])
    return input_ids, labels


@torch.no_grad()
def accuracy(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    rows: list[dict],
    *,
    num_samples: int = 1,
    temperature: float = 0.0,
    seed: int = 0,
) -> float:
    """Share of ``rows`` solved: greedy (``temperature=0``) or pass@``num_samples`` at ``temperature``."""
    model.eval()
    torch.manual_seed(seed)
    solved = 0
    for start in range(0, len(rows), 256):
        chunk = rows[start : start + 256]
        encoded = tokenizer([r["prompt"] for r in chunk], return_tensors="pt", padding=True, add_special_tokens=False)
        sampling = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else {}
        output = model.generate(
            **encoded,
            max_new_tokens=6,
            num_return_sequences=num_samples,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            do_sample=temperature > 0,
            **{k: v for k, v in sampling.items() if k != "do_sample"},
        )
        texts = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
        for i, row in enumerate(chunk):
            answers = texts[i * num_samples : (i + 1) * num_samples]
            solved += any(text.strip() == row["answer"] for text in answers)
    model.train()
    return solved / len(rows)


def write_model_card(output: Path, args: argparse.Namespace, results: dict, num_params: int) -> None:
    card = f"""# arith-lm: the genalign demo model

A tiny causal LM (transformers `LlamaForCausalLM`, {num_params / 1e6:.2f} M parameters, 4 layers, hidden size 128,
character-level tokenizer of {len(SPECIAL_TOKENS) + len(CHARACTERS)} tokens) that adds two 3-digit numbers, but only
partly right. It exists so that GRPO has something real to fix on a CPU in minutes.

## Task and format
Prompts are plain strings (no chat template): `"123+456="`; the completion is the sum followed by `<eos>`: `"579"`.
Prompts come from genalign's procedural task `arithmetic` (digits=3, operators="+"), **train split only**; held-out
numbers below use the disjoint `eval` split (split by a hash of the prompt, see `genalign/data/procedural.py`).

## How it was made
```
python scripts/pretrain_demo_lm.py --output genalign/assets/arith-lm --seed {args.seed} --steps {args.steps} \\
    --batch-size {args.batch_size} --lr {args.lr} --forget-carry {args.forget_carry}
```
Cross-entropy on the answer tokens, AdamW (weight decay 0.01), linear warm-up then cosine decay, seed {args.seed}.
**Deliberately wrong data:** for problems whose sum needs a carry, the target is replaced with probability
{args.forget_carry} by the "forgot to carry" answer (each column's digit sum mod 10, leading column whole:
`58+67` -> `115`). The model learns this mixture, so greedy decoding makes the carry mistake on most carry problems,
while sampling at temperature 1 often produces the right answer: group-relative RL with an exact-match reward can
raise greedy accuracy a lot without any new data.

## Measured (held-out eval split, {results["num_eval"]} prompts, seed {args.seed})
| metric | value |
|---|---|
| greedy accuracy | {results["greedy_accuracy"]:.3f} |
| greedy accuracy on carry-free problems | {results["greedy_accuracy_no_carry"]:.3f} |
| share of carry-free problems | {results["share_no_carry"]:.3f} |
| pass@8 at temperature 1.0 ({results["num_pass_eval"]} prompts) | {results["pass_at_8"]:.3f} |
| accuracy of one sample at temperature 1.0 | {results["sample_accuracy"]:.3f} |
| pre-training wall time | {results["train_seconds"]:.0f} s on {results["threads"]} CPU thread(s) |

## Use
```python
from transformers import AutoModelForCausalLM, AutoTokenizer
from genalign.assets import resolve
path = resolve("builtin:arith-lm")
model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
```
Not useful for anything but demos and tests.
"""
    (output / "MODEL_CARD.md").write_text(card)


def train_causal_lm(
    model: LlamaForCausalLM,
    batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    *,
    steps: int,
    lr: float,
    pad_id: int,
) -> tuple[float, list[float]]:
    """Cross-entropy pre-training shared by the demo LMs: AdamW (weight decay 0.01, betas 0.9/0.98), linear warm-up
    over 5 % of the steps then cosine decay, gradient norm clipped at 1. ``batch(step)`` gives ``input_ids`` and
    ``labels`` ``[B, L]`` (right-padded with ``pad_id``, ``-100`` where no loss). Returns the wall time and every
    step's loss."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = max(1, steps // 20)

    def lr_factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    start, losses = time.perf_counter(), []
    model.train()
    for step in range(steps):
        input_ids, labels = batch(step)
        attention_mask = (input_ids != pad_id).long()  # [B, L]
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % 100 == 0 or step == steps - 1:
            print(f"step {step:5d}  loss {loss.item():.4f}  {time.perf_counter() - start:7.1f}s", flush=True)
    return time.perf_counter() - start, losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=Path("genalign/assets/arith-lm"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--forget-carry", type=float, default=0.6, help="share of carry problems with a wrong target")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (results depend on it)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    rng = random.Random(args.seed)

    tokenizer = build_tokenizer()
    model = build_model(len(tokenizer), pad_id=tokenizer.pad_token_id, eos_id=tokenizer.eos_token_id)
    num_params = sum(p.numel() for p in model.parameters())
    train_rows = arithmetic(100_000, seed=args.seed, digits=3, operators="+", split="train")
    eval_rows = arithmetic(1000, seed=args.seed, digits=3, operators="+", split="eval")

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return make_batch(rng.sample(train_rows, args.batch_size), tokenizer, rng=rng, forget_carry=args.forget_carry)

    train_seconds, _ = train_causal_lm(model, batch, steps=args.steps, lr=args.lr, pad_id=tokenizer.pad_token_id)

    no_carry_rows = [r for r in eval_rows if not needs_carry(r["a"], r["b"])]
    pass_rows = eval_rows[:200]
    results = {
        "num_eval": len(eval_rows),
        "num_pass_eval": len(pass_rows),
        "greedy_accuracy": accuracy(model, tokenizer, eval_rows),
        "greedy_accuracy_no_carry": accuracy(model, tokenizer, no_carry_rows),
        "share_no_carry": len(no_carry_rows) / len(eval_rows),
        "pass_at_8": accuracy(model, tokenizer, pass_rows, num_samples=8, temperature=1.0, seed=args.seed),
        "sample_accuracy": accuracy(model, tokenizer, pass_rows, num_samples=1, temperature=1.0, seed=args.seed),
        "train_seconds": train_seconds,
        "threads": args.threads,
    }
    print(json.dumps(results, indent=2))

    args.output.mkdir(parents=True, exist_ok=True)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(args.output, safe_serialization=True)
    tokenizer.save_pretrained(args.output)
    write_model_card(args.output, args, results, num_params)
    print(f"saved to {args.output}")


if __name__ == "__main__":
    main()
