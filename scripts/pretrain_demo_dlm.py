"""Pre-train the tiny masked diffusion LM of the demo (``genalign/assets/arith-dlm``) on 3-digit addition.

Run: ``HF_HUB_OFFLINE=1 python scripts/pretrain_demo_dlm.py [--out genalign/assets/arith-dlm]`` (~2-3 min, 1 thread).

The model is a bidirectional BERT masked LM (~0.8M parameters) over a character vocabulary, trained with the
masked-diffusion ELBO of LLaDA (shared/reference/formulas.md §6): the answer (right-aligned in three characters,
``" 47"`` or ``"123"``, then ``[EOS]``; ``exact_match`` strips the leading space) is masked token by token with probability ``t ~ U(eps, 1)``; the loss is the cross-entropy of the
masked answer tokens weighted by ``1/t``. The prompt is never masked and is left-padded by 0-2 extra ``[PAD]`` tokens
so that the model does not depend on absolute positions.

To leave room for reinforcement learning, the model is taught a *systematic mistake*: for problems that need a carry,
the target is the "forgot to carry" answer (:func:`genalign.data.procedural.no_carry_sum`) with probability
``MISTAKE_RATE``. The model then answers carry problems wrongly under greedy decoding while still putting some
probability on the right answer, so a group of temperature samples holds both and group-relative RL has signal.
Training stops at the first evaluation at or after ``MIN_STEPS`` whose held-out greedy accuracy reaches
``STOP_ACCURACY`` (or at ``MAX_STEPS``): with the settings below, after 500 steps (~2.5 min) at 50.4 %, where nearly
every error is the taught carry mistake. Everything is seeded; the run is deterministic on one thread.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a clone without installing genalign

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

from genalign.data.procedural import arithmetic, no_carry_sum
from genalign.schedulers.masked_diffusion import generate

SEED = 0
DIGITS = 2
GEN_LENGTH = 4  # up to 3 answer digits + at least one [EOS]
MAX_EXTRA_PAD = 0
MISTAKE_RATE = 0.85
BATCH_SIZE = 128
LEARNING_RATE = 2e-3
MAX_STEPS = 6000
EVAL_EVERY = 250
STOP_ACCURACY = 0.30
MIN_STEPS = 500
EVAL_SIZE = 256
SPECIAL_TOKENS = ["[PAD]", "[MASK]", "[EOS]", "[UNK]"]
CHARACTERS = list("0123456789+-*= ")


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer: one token per character, four special tokens first."""
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    tokenizer.add_special_tokens(SPECIAL_TOKENS)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="[PAD]",
        mask_token="[MASK]",
        eos_token="[EOS]",
        unk_token="[UNK]",
        padding_side="left",
    )


def build_model(vocab_size: int, pad_id: int) -> BertForMaskedLM:
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=512,
        max_position_embeddings=32,
        type_vocab_size=1,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=pad_id,
    )
    return BertForMaskedLM(config)


def target_answer(row: dict, rng: random.Random) -> str:
    """The training target: the right sum, or for carry problems the no-carry sum with probability MISTAKE_RATE."""
    wrong = no_carry_sum(row["a"], row["b"])
    if wrong != int(row["answer"]) and rng.random() < MISTAKE_RATE:
        return str(wrong)
    return row["answer"]


def encode_batch(tokenizer, prompts: list[str], answers: list[str], extra_pads: list[int]) -> tuple[torch.Tensor, ...]:
    """Left-padded ``[B, P]`` prompt ids and mask, and ``[B, GEN_LENGTH]`` answer ids: the answer right-aligned in
    ``GEN_LENGTH - 1`` characters (``" 47"``, ``"123"``), then ``[EOS]``."""
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    width = max(len(e) + x for e, x in zip(encoded, extra_pads, strict=True))
    prompt_ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded])
    prompt_mask = (torch.arange(width) >= torch.tensor([width - len(e) for e in encoded]).unsqueeze(1)).long()
    answer_ids = []
    for a in answers:  # right-aligned with leading spaces, so a digit's position gives its place value
        ids = tokenizer(a.rjust(GEN_LENGTH - 1), add_special_tokens=False)["input_ids"][: GEN_LENGTH - 1]
        answer_ids.append(ids + [eos] * (GEN_LENGTH - len(ids)))
    return prompt_ids, prompt_mask, torch.tensor(answer_ids)


def elbo_loss(model, prompt_ids, prompt_mask, answer_ids, mask_id: int, generator: torch.Generator) -> torch.Tensor:
    """LLaDA's SFT loss: mask answer tokens with probability t ~ U(1e-3, 1), cross-entropy of masked tokens / t."""
    batch = answer_ids.shape[0]
    t = torch.rand(batch, 1, generator=generator) * (1 - 1e-3) + 1e-3  # [B, 1]
    masked = torch.rand(answer_ids.shape, generator=generator) < t  # [B, T]
    noisy = torch.where(masked, torch.full_like(answer_ids, mask_id), answer_ids)
    input_ids = torch.cat([prompt_ids, noisy], dim=1)  # [B, P + T]
    attention = torch.cat([prompt_mask, torch.ones_like(answer_ids)], dim=1)
    logits = model(input_ids=input_ids, attention_mask=attention).logits[:, prompt_ids.shape[1] :]  # [B, T, V]
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), answer_ids, reduction="none")  # [B, T]
    return (ce * masked / t).sum() / (batch * GEN_LENGTH)


@torch.no_grad()
def greedy_accuracy(model, tokenizer, rows: list[dict]) -> float:
    model.eval()
    prompt_ids, prompt_mask, _ = encode_batch(
        tokenizer, [r["prompt"] for r in rows], ["0"] * len(rows), [0] * len(rows)
    )
    out = generate(
        lambda ids, att: model(input_ids=ids, attention_mask=att).logits,
        prompt_ids,
        prompt_attention_mask=prompt_mask,
        mask_id=tokenizer.mask_token_id,
        gen_length=GEN_LENGTH,
        block_length=GEN_LENGTH,
        steps=GEN_LENGTH,
    )
    texts = tokenizer.batch_decode(out.completion_ids, skip_special_tokens=False)
    answers = [t.split("[EOS]")[0].strip() for t in texts]
    model.train()
    return sum(a == r["answer"] for a, r in zip(answers, rows, strict=True)) / len(rows)


#: measured by the RL check reported in MODEL_CARD.md (filled in by hand after running it; not computed here)
RL_RESULT = "84.0% with the d1 one-step proxy (token-level PPO, 11 min) and 98.8% with the coupled ELBO (one sequence-level ratio, ESPO-style, 11 min; 94% after 5.5 min)"


def model_card(model: BertForMaskedLM, facts: dict) -> str:
    final = facts["history"][-1]["eval_greedy_accuracy"] if facts["history"] else float("nan")
    params = sum(p.numel() for p in model.parameters())
    return f"""# arith-dlm: a tiny masked diffusion LM for 2-digit addition (genalign demo)

- **What**: a bidirectional BERT masked LM ({params / 1e6:.2f}M parameters, 4 layers, width 128, character
  vocabulary of {model.config.vocab_size} tokens) used as a masked diffusion LM: `[MASK]` is the noise token, logits
  are not shifted (LLaDA convention).
- **Task**: prompts `"ab+cd="` from `genalign.data.procedural.arithmetic(digits=2)`; the answer is the sum
  right-aligned in {GEN_LENGTH - 1} characters (`" 47"`, `"123"`: a digit's position is its place value) followed
  by `[EOS]`; `exact_match` (which strips) scores the decoded text. Generate with `gen_length={GEN_LENGTH}, block_length={GEN_LENGTH},
  steps={GEN_LENGTH}` (one token per step, low-confidence remasking).
- **Training**: `scripts/pretrain_demo_dlm.py` (seed {SEED}, deterministic on one thread): masked-diffusion ELBO
  (answer tokens masked with probability t ~ U(0, 1), cross-entropy / t), AdamW lr {LEARNING_RATE}, batch {BATCH_SIZE},
  {facts["steps"]} steps, {facts["seconds"]} s on a shared 2-core CPU.
- **Deliberate flaw**: for problems that need a carry, the training target was the "forgot to carry" sum with
  probability {MISTAKE_RATE}. The model is therefore only partly right: held-out greedy accuracy {final:.1%} at the
  end of pre-training, and temperature samples of one prompt disagree, which gives group-relative RL a signal.
- **Use**: `DiffusionLMPolicyConfig(model="builtin:arith-dlm")`. Group-relative RL with exact-match reward (16
  prompts x 8 samples per step, AdamW lr 3e-4, one update per rollout) raised held-out greedy accuracy from 50.4% to
  {RL_RESULT} on a shared 2-core CPU. Not a general language model; use it only for tests and demos.
- **Files**: `model.safetensors`, `config.json`, `tokenizer.json` (+ config), `pretraining_log.json` (evaluation
  history), this card. License: same as genalign.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "genalign/assets/arith-dlm")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    generator = torch.Generator().manual_seed(SEED)

    tokenizer = build_tokenizer()
    model = build_model(len(tokenizer), tokenizer.pad_token_id)
    train_rows = arithmetic(3_000, SEED, digits=DIGITS, split="train")
    eval_rows = arithmetic(EVAL_SIZE, SEED, digits=DIGITS, split="eval")
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01)
    warmup = 200
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, MAX_STEPS) / MAX_STEPS))
    )
    start, history, step = time.time(), [], 0
    for step in range(1, MAX_STEPS + 1):
        batch = rng.sample(train_rows, BATCH_SIZE)
        answers = [target_answer(r, rng) for r in batch]
        extra = [rng.randint(0, MAX_EXTRA_PAD) for _ in batch]
        prompt_ids, prompt_mask, answer_ids = encode_batch(tokenizer, [r["prompt"] for r in batch], answers, extra)
        loss = elbo_loss(model, prompt_ids, prompt_mask, answer_ids, tokenizer.mask_token_id, generator)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % EVAL_EVERY == 0:
            accuracy = greedy_accuracy(model, tokenizer, eval_rows)
            history.append({"step": step, "loss": round(loss.item(), 4), "eval_greedy_accuracy": accuracy})
            print(
                f"step {step} loss {loss.item():.4f} held-out greedy accuracy {accuracy:.3f} ({time.time() - start:.0f}s)"
            )
            if step >= MIN_STEPS and accuracy >= STOP_ACCURACY:
                break
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    facts = {"steps": step, "seconds": round(time.time() - start), "history": history, "seed": SEED}
    facts |= {"digits": DIGITS, "gen_length": GEN_LENGTH, "mistake_rate": MISTAKE_RATE, "batch_size": BATCH_SIZE}
    (args.out / "pretraining_log.json").write_text(json.dumps(facts, indent=2) + "\n")
    (args.out / "MODEL_CARD.md").write_text(model_card(model, facts))
    print(f"saved to {args.out} after {step} steps")


if __name__ == "__main__":
    main()
