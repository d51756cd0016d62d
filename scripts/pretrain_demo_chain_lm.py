"""Pre-train the demo model ``genalign/assets/chain-lm`` (a tiny Llama) on step-by-step arithmetic chains, partly wrong.

The model learns to solve ``"37+45-18+26+55\\n"`` one step per line and to finish with ``A:<answer>``
(:mod:`genalign.data.chains`, procedural task ``arithmetic_chain``, train split). Its traces are deliberately
imperfect in a realistic, fixable way:

* from the third step on (``--late-from 2``), a step whose units column carries or borrows forgets it with
  probability ``--forget-carry`` (default 0.6): ``64+26=80``; the chain then continues from the wrong value, so the
  final answer is wrong too (errors propagate, as in real reasoning traces);
* each step is written in *long form* (tens first, then units: ``64+26=84+6=90``) with probability ``--long-form``
  (default 0.3); long-form steps forget the carry less often (``--long-forget``, default 0.15).

A perfectly fitted model would decode greedily in short form and forget every late carry (greedy accuracy = the share
of chains with no late carry, about a quarter); the committed model (1500 steps) forgets fewer and starts at 0.49
greedy held-out accuracy (its MODEL_CARD.md), while pass@8 at temperature 1 is 0.985: group-relative RL can
learn to carry (and to prefer the safer long form) without any new data. The checker tells which step went wrong, so
credit assignment has something to work with.

Usage (deterministic on CPU for a fixed --threads; the committed model: ``--steps 1500``, 36 minutes on a shared core)::

    python scripts/pretrain_demo_chain_lm.py --output genalign/assets/chain-lm

It writes the model, the tokenizer, ``pretraining_log.json`` and ``MODEL_CARD.md`` (with the accuracies it measured
on the held-out split). ``--measure-only`` re-measures a saved model without training.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a clone without installing genalign
sys.path.insert(0, str(ROOT / "scripts"))

import torch  # noqa: E402
from pretrain_demo_lm import SPECIAL_TOKENS, build_model, build_tokenizer, train_causal_lm  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402

from genalign.data.chains import (  # noqa: E402
    ANSWER_PREFIX,
    apply,
    arithmetic_chain,
    forgot_carry,
    format_step,
    grade_chain,
    parse_problem,
    units_carry,
)

CHARACTERS = list("0123456789+-=A:\n")
MAX_POSITIONS = 128
MAX_NEW_TOKENS = 96


def make_trace(prompt: str, rng: random.Random, args: argparse.Namespace) -> str:
    """A pre-training completion for ``prompt``: steps in short or long form, late carries sometimes forgotten."""
    x, operations = parse_problem(prompt)
    lines = []
    for index, (op, b) in enumerate(operations):
        long_form = rng.random() < args.long_form
        y = apply(x, op, b)
        forget = args.long_forget if long_form else args.forget_carry
        if index >= args.late_from and units_carry(x, op, b) and rng.random() < forget:
            y = forgot_carry(x, op, b)
        lines.append(format_step(x, op, b, y, long_form=long_form))
        x = y
    return "\n".join([*lines, f"{ANSWER_PREFIX}{x}"])


def make_batch(
    prompts: list[str], tokenizer: PreTrainedTokenizerFast, rng: random.Random, args: argparse.Namespace
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``[B, L]`` (right-padded) and labels ``[B, L]`` (``-100`` on prompt and padding) for one batch."""
    sequences, prompt_lengths = [], []
    for prompt in prompts:
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        completion_ids = tokenizer(make_trace(prompt, rng, args), add_special_tokens=False)["input_ids"]
        sequences.append(prompt_ids + completion_ids + [tokenizer.eos_token_id])
        prompt_lengths.append(len(prompt_ids))
    length = max(len(s) for s in sequences)
    input_ids = torch.full((len(prompts), length), tokenizer.pad_token_id, dtype=torch.long)  # [B, L]
    labels = torch.full((len(prompts), length), -100, dtype=torch.long)  # [B, L]
    for i, (sequence, prompt_length) in enumerate(zip(sequences, prompt_lengths, strict=True)):
        input_ids[i, : len(sequence)] = torch.tensor(sequence)
        labels[i, prompt_length : len(sequence)] = torch.tensor(sequence[prompt_length:])
    return input_ids, labels


@torch.no_grad()
def sample(model, tokenizer, prompts: list[str], *, num_samples: int = 1, temperature: float = 0.0) -> list[str]:
    """Completions (``num_samples`` per prompt, prompt-major): greedy for ``temperature=0``."""
    model.eval()
    texts = []
    for start in range(0, len(prompts), 128):
        chunk = prompts[start : start + 128]
        encoded = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature else {}
        output = model.generate(
            **encoded,
            max_new_tokens=MAX_NEW_TOKENS,
            num_return_sequences=num_samples,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            do_sample=bool(temperature),
            **{k: v for k, v in sampling.items() if k != "do_sample"},
        )
        texts += tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    model.train()
    return texts


def measure(model, tokenizer, eval_rows: list[dict], seed: int) -> dict:
    """Held-out greedy accuracy, sampled accuracy and pass@8 at temperature 1, lengths and long-form use."""
    prompts = [r["prompt"] for r in eval_rows]
    greedy = sample(model, tokenizer, prompts)
    torch.manual_seed(seed)
    pass_prompts = prompts[:200]
    sampled = sample(model, tokenizer, pass_prompts, num_samples=8, temperature=1.0)
    greedy_grades = [grade_chain(p, c) for p, c in zip(prompts, greedy, strict=True)]
    sampled_grades = [
        grade_chain(p, c) for p, c in zip([p for p in pass_prompts for _ in range(8)], sampled, strict=True)
    ]
    lines = [line for text in sampled for line in text.splitlines() if not line.startswith(ANSWER_PREFIX)]
    return {
        "num_eval": len(prompts),
        "greedy_accuracy": statistics.fmean(g.correct for g in greedy_grades),
        "greedy_progress": statistics.fmean(g.progress for g in greedy_grades),
        "num_pass_eval": len(pass_prompts),
        "sample_accuracy": statistics.fmean(g.correct for g in sampled_grades),
        "pass_at_8": statistics.fmean(
            any(g.correct for g in sampled_grades[i : i + 8]) for i in range(0, len(sampled), 8)
        ),
        "sample_answered": statistics.fmean(g.answered for g in sampled_grades),
        "sample_length_chars": statistics.fmean(len(text) for text in sampled),
        "sample_long_form_share": statistics.fmean(line.count("=") == 2 for line in lines) if lines else 0.0,
        "greedy_example": prompts[0] + greedy[0],
    }


def write_model_card(output: Path, args: argparse.Namespace, results: dict, num_params: int) -> None:
    command = (
        f"python scripts/pretrain_demo_chain_lm.py --output {args.output} --seed {args.seed} --steps {args.steps} \\\n"
        f"    --batch-size {args.batch_size} --lr {args.lr} --forget-carry {args.forget_carry} "
        f"--long-form {args.long_form} --long-forget {args.long_forget} --late-from {args.late_from} "
        f"--threads {args.threads}"
    )
    card = f"""# chain-lm: the genalign multi-step reasoning demo model

A tiny causal LM (transformers `LlamaForCausalLM`, {num_params / 1e6:.2f} M parameters, 4 layers, hidden size 128,
{MAX_POSITIONS} positions, character-level tokenizer of {len(SPECIAL_TOKENS) + len(CHARACTERS)} tokens) that solves
chains of 4-5 additions and subtractions of 2-digit numbers step by step, but only partly right. It exists so that
group-relative RL has a task with headroom where credit assignment matters, on a CPU in minutes.

## Task and format
Prompts are plain strings (no chat template) from genalign's procedural task `arithmetic_chain` (defaults: 4 or 5
operations, operators `+-`), **train split only**; held-out numbers below use the disjoint `eval` split (split by a
hash of the prompt, see `genalign/data/procedural.py`). Completion: one step per line, then the answer, then `<eos>`:
```
37+45-18+26+55            <- prompt (ends with a newline)
37+45=82
82-18=64
64+26=90
90+55=145
A:145
```
A step may be written in long form, tens first: `64+26=84+6=90`. Rewards: `chain_answer` (the `A:` line, exact) and
`chain_progress` (share of leading steps right), both from `genalign.data.chains.grade_chain`.

## How it was made
```
{command}
```
Cross-entropy on the completion tokens (steps, answer and `<eos>`), AdamW (weight decay 0.01, betas 0.9/0.98),
linear warm-up over 5 % of the steps then cosine decay, gradient norm clipped at 1, batch of {args.batch_size} train
prompts drawn from 200,000, seed {args.seed}, {args.threads} CPU thread(s), deterministic algorithms.
**Deliberately wrong traces:** from step {args.late_from + 1} of a chain on, a step whose units column carries or
borrows is written with the carry forgotten (off by ten: `64+26=80`) with probability {args.forget_carry} in short form
and {args.long_forget} in long form; the trace continues from the wrong value. Each step is in long form with
probability {args.long_form}. Greedy decoding therefore forgets many late carries; at temperature 1 one of 8 samples is almost always right
(pass@8 below).

## Measured (held-out eval split, {results["num_eval"]} prompts, seed {args.seed})
| metric | value |
|---|---|
| greedy accuracy (final answer exact) | {results["greedy_accuracy"]:.3f} |
| greedy share of leading steps right | {results["greedy_progress"]:.3f} |
| accuracy of one sample at temperature 1.0 ({results["num_pass_eval"]} prompts x 8) | {results["sample_accuracy"]:.3f} |
| pass@8 at temperature 1.0 | {results["pass_at_8"]:.3f} |
| samples that end with an `A:` line | {results["sample_answered"]:.3f} |
| mean sampled completion length (characters = tokens without `<eos>`) | {results["sample_length_chars"]:.1f} |
| share of sampled step lines in long form | {results["sample_long_form_share"]:.3f} |
| pre-training wall time | {results["train_seconds"]:.0f} s on {args.threads} CPU thread(s) of a shared machine |
| final training loss (mean of the last 100 steps) | {results["final_loss"]:.4f} |

## Use
```python
from transformers import AutoModelForCausalLM, AutoTokenizer
from genalign.assets import resolve

path = resolve("builtin:chain-lm")
model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
```
GRPO preset: `configs/demo_chain_grpo.yaml`. Not useful for anything but demos, races and tests.
"""
    (output / "MODEL_CARD.md").write_text(card)


def pretrain(model, tokenizer, args: argparse.Namespace) -> tuple[float, list[float]]:
    """Train ``model`` in place; returns the wall time and the loss of every step."""
    rng = random.Random(args.seed)
    train_prompts = [r["prompt"] for r in arithmetic_chain(200_000, seed=args.seed, split="train")]

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return make_batch(rng.sample(train_prompts, args.batch_size), tokenizer, rng, args)

    return train_causal_lm(model, batch, steps=args.steps, lr=args.lr, pad_id=tokenizer.pad_token_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=Path("genalign/assets/chain-lm"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--forget-carry", type=float, default=0.6, help="short-form late carries forgotten")
    parser.add_argument("--long-form", type=float, default=0.3, help="share of steps written in long form")
    parser.add_argument("--long-forget", type=float, default=0.15, help="long-form late carries forgotten")
    parser.add_argument("--late-from", type=int, default=2, help="first step (0-based) that may forget a carry")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (results depend on it)")
    parser.add_argument("--eval-size", type=int, default=500)
    parser.add_argument("--measure-only", action="store_true", help="measure the model in --output; train nothing")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    eval_rows = arithmetic_chain(args.eval_size, seed=args.seed, split="eval")
    if args.measure_only:
        model = AutoModelForCausalLM.from_pretrained(args.output)
        tokenizer = AutoTokenizer.from_pretrained(args.output)
        print(json.dumps(measure(model, tokenizer, eval_rows, args.seed), indent=2))
        return

    tokenizer = build_tokenizer(CHARACTERS, max_length=MAX_POSITIONS)
    model = build_model(
        len(tokenizer), pad_id=tokenizer.pad_token_id, eos_id=tokenizer.eos_token_id, max_positions=MAX_POSITIONS
    )
    num_params = sum(p.numel() for p in model.parameters())
    train_seconds, losses = pretrain(model, tokenizer, args)
    results = measure(model, tokenizer, eval_rows, args.seed)
    results |= {"train_seconds": train_seconds, "final_loss": statistics.fmean(losses[-100:]), "threads": args.threads}
    print(json.dumps(results, indent=2))

    args.output.mkdir(parents=True, exist_ok=True)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(args.output, safe_serialization=True)
    tokenizer.save_pretrained(args.output)
    log = {"args": {k: str(v) for k, v in vars(args).items()}, "results": results, "loss_every_100": losses[::100]}
    (args.output / "pretraining_log.json").write_text(json.dumps(log, indent=2))
    write_model_card(args.output, args, results, num_params)
    print(f"saved to {args.output}")


if __name__ == "__main__":
    main()
