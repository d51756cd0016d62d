"""Pre-train the demo model ``genalign/assets/tool-lm`` (a tiny Llama) to answer arithmetic questions in a chat format,
calling the ``calculator`` tool with Hermes / Qwen ``<tool_call>`` blocks, imperfectly.

Task: genalign's ``calculator_arithmetic`` (``What is 4821 * 9377? You can use the calculator tool. ...``; 4-digit
operands, operators ``+`` and ``*``), **train split only**. Every pre-training conversation is played against the real
environment and rendered with the model's own chat template exactly as the multi-turn rollout renders it
(:class:`genalign.policies.lm.chat_turns.ChatRenderer`: the prompt, each assistant turn, and the suffix the template
adds after it, tokenized separately), so the token sequences the model learns are the ones it will be trained on with
GRPO. The loss is on the assistant turns only (their ``<|im_end|>`` included). A correct conversation::

    <|im_start|>system
    Tools: calculator(expression)<|im_end|>
    <|im_start|>user
    What is 8594 * 9846? You can use the calculator tool. When you ... reply with 'Answer: <number>'.<|im_end|>
    <|im_start|>assistant
    <tool_call>{"name": "calculator", "arguments": {"expression": "8594 * 9846"}}</tool_call><|im_end|>
    <|im_start|>tool
    84616524<|im_end|>
    <|im_start|>assistant
    Answer: 84616524<|im_end|>

The demonstrations are deliberately imperfect in realistic, fixable ways (each a knob below):

* **answering without the tool**: a sum is answered directly with probability ``--direct-add`` (default 0.6), by
  "mental arithmetic" that forgets every carry (``3552 + 2298`` -> ``5740``; right only when no column carries); a
  product with probability ``--direct-mul`` (0.1), by a guess of the right length;
* **wrong arguments**: the first call is malformed with probability ``--bad-call`` (0.15): half of them write ``x``
  for ``*`` (or ``plus`` for ``+``), which the calculator refuses (``tool_error``), half drop the closing brace
  (``bad_json``); after such an error observation the demonstration retries correctly with probability ``--retry``
  (0.5), else it guesses;
* **not copying the observation exactly**: a result of 8 digits or more is written rounded down to thousands with
  probability ``--round-down`` (0.6): ``84616524`` -> ``84616000`` (an approximate answer where an exact one is asked).

Greedy decoding therefore answers most sums without the tool and rounds most products (83 % of the products of two
4-digit numbers have 8 digits); sampled conversations contain every behaviour, so GRPO with the environment's
exact-answer reward has a clear signal: call the tool for sums too, write the call right, copy the whole result.

The tokenizer is a BPE trained here on the rendered pre-training segments (digits always single tokens, every printable
ASCII character in the alphabet, ``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>`` special), so the constant phrases
of the format become a few tokens each (the committed tokenizer has 369 of the 512 allowed: the corpus has no more
pairs to merge) and a conversation is 26-78 tokens, 46 on average.

Usage (deterministic on CPU for a fixed ``--threads``, the BPE too; the committed model: the defaults, 1539 s (26 min)
on one thread of the shared 2-core development machine under load, as its MODEL_CARD.md records)::

    python scripts/pretrain_demo_tool_lm.py --output genalign/assets/tool-lm

It writes the model, the tokenizer (with its chat template), ``pretraining_log.json`` and ``MODEL_CARD.md`` (held-out
success and tool use measured through genalign's multi-turn rollout, as GRPO evaluates). ``--measure-only`` re-measures
a saved model without training.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import string
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a clone without installing genalign
sys.path.insert(0, str(ROOT / "scripts"))

import torch  # noqa: E402
from pretrain_demo_lm import build_model, train_causal_lm  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

from genalign.data.procedural import no_carry_sum  # noqa: E402
from genalign.environments import EnvironmentSet, ModelTurn  # noqa: E402
from genalign.environments.tasks import calculator_arithmetic  # noqa: E402
from genalign.policies.base import add_counts  # noqa: E402
from genalign.policies.lm.chat_turns import ChatRenderer  # noqa: E402

PAD, START, END, UNK = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"
SPECIAL_TOKENS = [PAD, START, END, UNK]
ALPHABET = sorted(set(string.printable) - set("\t\r\x0b\x0c"))  # printable ASCII, space and newline
#: A prefix-preserving ChatML template (each message rendered on its own, past turns verbatim). The tools are listed in
#: a first system block as ``name(argument, ...)``; tool answers are ``tool`` messages.
CHAT_TEMPLATE = (
    "{%- if tools %}{{ '<|im_start|>system\\nTools: ' }}"
    "{%- for tool in tools %}{%- set f = tool['function'] if tool['function'] is defined else tool %}"
    "{{ f['name'] + '(' }}{%- if f['parameters'] is defined and f['parameters']['properties'] is defined %}"
    "{{ f['parameters']['properties'] | list | join(', ') }}{%- endif %}{{ ')' }}{{ ', ' if not loop.last else '' }}"
    "{%- endfor %}{{ '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)
TASK_ARGS = {"digits": 4, "operators": "+*"}  # configs/demo_tool_calculator_grpo.yaml uses the same
ENVIRONMENT = {"name": "calculator_arithmetic", "max_turns": 4}
MAX_TURNS = 4
MAX_POSITIONS = 256
MAX_NEW_TOKENS = 48


# ----------------------------------------------------------------------------------------------------------------------
# demonstrations
# ----------------------------------------------------------------------------------------------------------------------


def tool_call(expression: str, *, close: bool = True) -> str:
    """A Hermes / Qwen tool-call block for the calculator (``close=False`` drops the JSON's closing brace)."""
    arguments = json.dumps({"name": "calculator", "arguments": {"expression": expression}})
    return f"<tool_call>{arguments if close else arguments[:-1]}</tool_call>"


def answer(number: int | str) -> str:
    return f"Answer: {number}"


def round_down(digits: str, places: int = 3) -> str:
    """An integer's ``digits`` rounded down to a multiple of ``10**places``: ``"84616524"`` -> ``"84616000"``."""
    return digits[:-places] + "0" * places if len(digits) > places else digits


#: results with at least this many digits may be rounded down (module docstring)
ROUND_FROM_DIGITS = 8


def guess(expression: str, rng: random.Random) -> int:
    """A direct answer without the tool: the carry-forgetting sum of a sum, a random number of the right length for a
    product."""
    a, op, b = expression.split()
    if op == "+":
        return no_carry_sum(int(a), int(b))
    length = len(str(int(a) * int(b)))
    return rng.randint(10 ** (length - 1), 10**length - 1)


@dataclass
class Demonstrator:
    """The scripted, imperfect assistant of a pre-training conversation (module docstring); ``turn`` writes the next
    assistant message from the row and the last tool answer."""

    row: dict
    rng: random.Random
    args: argparse.Namespace

    def __post_init__(self) -> None:
        expression = self.row["expression"]
        direct = self.args.direct_add if " + " in expression else self.args.direct_mul
        self.direct = self.rng.random() < direct
        self.bad_call = None if self.rng.random() >= self.args.bad_call else self.rng.choice(["operator", "json"])

    def turn(self, index: int, tool_answer: str | None) -> str:
        expression = self.row["expression"]
        if index == 0:
            if self.direct:
                return answer(guess(expression, self.rng))
            if self.bad_call == "operator":
                return tool_call(expression.replace(" * ", " x ").replace(" + ", " plus "))
            return tool_call(expression, close=self.bad_call != "json")
        if tool_answer is None or tool_answer.startswith("Error"):
            if self.rng.random() < self.args.retry:
                return tool_call(expression)
            return answer(guess(expression, self.rng))
        large = len(tool_answer) >= ROUND_FROM_DIGITS and tool_answer.isdigit()
        return answer(round_down(tool_answer) if large and self.rng.random() < self.args.round_down else tool_answer)


def conversation(
    row: dict, renderer: ChatRenderer, environments: EnvironmentSet, rng: random.Random, args: argparse.Namespace
) -> tuple[list[int], list[int], list[str]]:
    """One demonstration played against the environment: token ids ``[L]``, labels ``[L]`` (``-100`` outside the
    assistant turns) and the assistant turns' texts. The layout is the multi-turn rollout's: the rendered prompt, each
    turn's ids followed by ``<|im_end|>``, then the template's suffix (``ChatRenderer.observation_ids``)."""
    episode = environments.start(row)
    tools = episode.tool_schemas
    messages = renderer.prompt_messages(row["prompt"], episode.observation, 0)
    ids = renderer.encode(renderer.render(messages, tools, generation_prompt=True))
    labels = [-100] * len(ids)
    demonstrator, tool_answer, texts = Demonstrator(row, rng, args), None, []
    end_id = renderer.tokenizer.convert_tokens_to_ids(END)
    for index in range(MAX_TURNS):
        text = demonstrator.turn(index, tool_answer)
        texts.append(text)
        turn_ids = [*renderer.encode(text), end_id]
        ids += turn_ids
        labels += turn_ids
        result = episode.environment.step(ModelTurn(text, index=index))
        if result.done:
            break
        answers = result.messages()
        assistant = {"role": "assistant", "content": text}
        suffix = renderer.observation_ids(messages, tools, assistant, text + END, answers)
        ids += suffix
        labels += [-100] * len(suffix)
        messages += [assistant, *answers]
        tool_answer = str(answers[-1]["content"]) if answers else None
    return ids, labels, texts


# ----------------------------------------------------------------------------------------------------------------------
# tokenizer and model
# ----------------------------------------------------------------------------------------------------------------------


def build_tokenizer(segments: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A BPE over printable ASCII trained on ``segments`` (rendered texts), digits kept as single tokens, with the
    special tokens and :data:`CHAT_TEMPLATE`."""
    backend = Tokenizer(models.BPE(unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Digits(individual_digits=True)
    backend.decoder = decoders.Fuse()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=ALPHABET, show_progress=False
    )
    pieces = [piece for text in segments for part in text.split(START) for piece in part.split(END) if piece]
    backend.train_from_iterator(pieces, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=END,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=[START],
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.model_max_length = MAX_POSITIONS
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def bootstrap_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer of the same alphabet, to render the texts the BPE is trained on."""
    return build_tokenizer([], vocab_size=len(SPECIAL_TOKENS) + len(ALPHABET))


def tokenizer_corpus(rows: list[dict], args: argparse.Namespace) -> list[str]:
    """The rendered segments of demonstrations of ``rows`` (prompt, turns, suffixes), as the rollout tokenizes them."""
    renderer = ChatRenderer(bootstrap_tokenizer())
    environments = EnvironmentSet(ENVIRONMENT)
    rng = random.Random(f"tokenizer/{args.seed}")
    segments = []
    for row in rows:
        ids, labels, _ = conversation(row, renderer, environments, rng, args)
        spans, start = [], 0
        for i in range(1, len(ids) + 1):  # split where the labels switch between prompt / environment and model
            if i == len(ids) or (labels[i] == -100) != (labels[start] == -100):
                spans.append(renderer.tokenizer.decode(ids[start:i], skip_special_tokens=False))
                start = i
        segments += spans
    return segments


def make_batch(
    rows: list[dict], renderer: ChatRenderer, environments: EnvironmentSet, rng: random.Random, args
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``[B, L]`` (right-padded) and labels ``[B, L]`` (``-100`` off the assistant turns) for one batch."""
    pairs = [conversation(row, renderer, environments, rng, args)[:2] for row in rows]
    length = max(len(ids) for ids, _ in pairs)
    input_ids = torch.full((len(rows), length), renderer.tokenizer.pad_token_id, dtype=torch.long)  # [B, L]
    labels = torch.full((len(rows), length), -100, dtype=torch.long)  # [B, L]
    for i, (ids, row_labels) in enumerate(pairs):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, : len(ids)] = torch.tensor(row_labels)
    return input_ids, labels


# ----------------------------------------------------------------------------------------------------------------------
# measuring through genalign's multi-turn rollout
# ----------------------------------------------------------------------------------------------------------------------


def demo_policy(path: Path, *, temperature: float):
    """The causal-LM policy of ``path`` with the demo's multi-turn settings (as in the GRPO preset)."""
    from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
    from genalign.policies.lm.multi_turn_options import MultiTurnOptions

    options = MultiTurnOptions(environments=dict(ENVIRONMENT), max_turns=MAX_TURNS)
    config = CausalLMPolicyConfig(model=str(path), use_chat_template=True, max_new_tokens=MAX_NEW_TOKENS,
                                  temperature=temperature, eval_temperature=1e-4, max_prompt_tokens=96,
                                  multi_turn=options)  # fmt: skip
    return build_policy(config, "cpu")


def rollout_stats(policy, rows: list[dict], group: int, mode: str) -> dict:
    """Success and tool use of ``group`` trajectories per row (chunks of 64 rows)."""
    rewards, counts, outputs, called, direct_sums = [], [], [], [], []
    for start in range(0, len(rows), 64):
        chunk = rows[start : start + 64]
        rollout = policy.rollout(chunk, group, mode=mode)
        rewards += [row["environment_reward"] or 0.0 for row in rollout.rows]
        outputs += rollout.outputs
        counts.append(rollout.counts)
        called += ["<tool_call>" in text for text in rollout.outputs]
        direct_sums += [" + " in row["expression"] and "<tool_call>" not in text
                        for row, text in zip(rollout.rows, rollout.outputs, strict=True)]  # fmt: skip
    sums = sum(" + " in row["expression"] for row in rows) * group
    info = add_counts(counts)
    calls = max(1, info.get("tools/calls", 0))
    return {
        "success": statistics.fmean(rewards),
        "pass_at_group": statistics.fmean(max(rewards[i : i + group]) for i in range(0, len(rewards), group)),
        "tool_use": statistics.fmean(called),
        "sums_without_tool": sum(direct_sums) / max(1, sums),
        "tool_calls_per_trajectory": info.get("tools/calls", 0) / len(rewards),
        "failed_call_share": 1 - info.get("tools/ok", 0) / calls,
        "turns_per_trajectory": info.get("turns", 0) / len(rewards),
        "example": outputs[0],
        "rewards": rewards,
    }


def measure(path: Path, eval_rows: list[dict], seed: int, pass_rows: int) -> dict:
    """Held-out greedy success (as GRPO's evaluation) and 8 samples at temperature 1 per prompt."""
    torch.manual_seed(seed)
    greedy = rollout_stats(demo_policy(path, temperature=1.0), eval_rows, 1, "eval")
    sampled = rollout_stats(demo_policy(path, temperature=1.0), eval_rows[:pass_rows], 8, "train")
    greedy.pop("rewards")
    sampled.pop("rewards")
    return {"num_eval": len(eval_rows), "num_pass_eval": pass_rows, "greedy": greedy, "sampled": sampled}


# ----------------------------------------------------------------------------------------------------------------------
# model card
# ----------------------------------------------------------------------------------------------------------------------


def command_line(args: argparse.Namespace) -> str:
    return (
        f"python scripts/pretrain_demo_tool_lm.py --output {args.output} --seed {args.seed} --steps {args.steps} \\\n"
        f"    --batch-size {args.batch_size} --lr {args.lr} --vocab-size {args.vocab_size} "
        f"--direct-add {args.direct_add} --direct-mul {args.direct_mul} \\\n"
        f"    --bad-call {args.bad_call} --retry {args.retry} --round-down {args.round_down} --threads {args.threads}"
    )


def write_model_card(output: Path, args: argparse.Namespace, results: dict, num_params: int, vocab: int) -> None:
    greedy, sampled = results["greedy"], results["sampled"]
    rows = [
        ("success (exact final answer)", "success"),
        ("trajectories with a tool call", "tool_use"),
        ("sums answered without the tool", "sums_without_tool"),
        ("tool calls per trajectory", "tool_calls_per_trajectory"),
        ("share of tool calls that failed (bad JSON, calculator error)", "failed_call_share"),
        ("model turns per trajectory", "turns_per_trajectory"),
    ]
    table = "\n".join(f"| {label} | {greedy[key]:.3f} | {sampled[key]:.3f} |" for label, key in rows)
    card = f"""# tool-lm: the genalign tool-use demo model

A tiny causal LM (transformers `LlamaForCausalLM`, {num_params / 1e6:.2f} M parameters, 4 layers, hidden size 128,
{MAX_POSITIONS} positions, a BPE tokenizer of {vocab} tokens trained with it) that answers arithmetic questions in a
ChatML-style chat, calling the `calculator` tool with Hermes / Qwen `<tool_call>` blocks, but only partly right. It
exists so that a multi-turn GRPO run with tools has something real to learn on a CPU in minutes
(`configs/demo_tool_calculator_grpo.yaml`).

## Task and format
Rows of genalign's procedural task `calculator_arithmetic` (digits=4, operators="+*"), **train split only**; the
held-out numbers below use the disjoint `eval` split (by a hash of the prompt). The environment of the same name runs
the calculator and rewards the exact final answer (`Answer: <number>` in the turn that calls no tool). The chat
template (`chat_template.jinja`) is prefix-preserving, as genalign's multi-turn rollout requires:
```
<|im_start|>system
Tools: calculator(expression)<|im_end|>
<|im_start|>user
What is 8594 * 9846? You can use the calculator tool. When you know the result, reply with 'Answer: <number>'.<|im_end|>
<|im_start|>assistant
<tool_call>{{"name": "calculator", "arguments": {{"expression": "8594 * 9846"}}}}</tool_call><|im_end|>
<|im_start|>tool
84616524<|im_end|>
<|im_start|>assistant
Answer: 84616524<|im_end|>
```
`<|im_end|>` is the end-of-sequence token; `<tool_call>` is plain text (kept when special tokens are skipped).

## How it was made
```
{command_line(args)}
```
Each pre-training conversation is played against the real `calculator_arithmetic` environment and tokenized segment by
segment exactly as genalign's multi-turn rollout does (prompt, each assistant turn + `<|im_end|>`, the template's suffix
after it). Cross-entropy on the assistant turns only, AdamW (weight decay 0.01, betas 0.9/0.98), linear warm-up over 5 %
of the steps then cosine decay, gradient norm clipped at 1, batches of {args.batch_size} conversations over 100,000
train rows, seed {args.seed}, {args.threads} CPU thread(s), deterministic algorithms. The tokenizer is a BPE trained
first on the rendered segments of 20,000 demonstrations (digits single tokens).

**Deliberately imperfect demonstrations** (see the script's docstring):
- a sum is answered without the tool, forgetting every carry, with probability {args.direct_add}; a product is
  guessed without the tool with probability {args.direct_mul};
- the first call is malformed with probability {args.bad_call} (half `x` / `plus` for the operator, which the
  calculator refuses; half a missing closing brace, which is not JSON); after the error the demonstration retries
  with probability {args.retry}, else guesses;
- a result of {ROUND_FROM_DIGITS} digits or more is answered rounded down to thousands (`84616524` -> `84616000`) with
  probability {args.round_down}.

## Measured (held-out eval split through genalign's multi-turn rollout, seed {args.seed})
Greedy: {results["num_eval"]} prompts, one trajectory each (as the GRPO preset evaluates); sampled: the first
{results["num_pass_eval"]} prompts x 8 trajectories at temperature 1.

| metric | greedy | sampled (T=1) |
|---|---|---|
{table}
| pass@8 | | {sampled["pass_at_group"]:.3f} |

Pre-training wall time: {results["train_seconds"]:.0f} s on {args.threads} CPU thread(s) of a shared 2-core machine;
final training loss (mean of the last 100 steps) {results["final_loss"]:.4f}.

Greedy transcript of the first held-out prompt (after the prompt; special tokens skipped):
```
{greedy["example"]}
```

## Use
```python
from transformers import AutoModelForCausalLM, AutoTokenizer
from genalign.assets import resolve

path = resolve("builtin:tool-lm")
model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
```
GRPO preset: `configs/demo_tool_calculator_grpo.yaml`. Not useful for anything but demos and tests.
"""
    (output / "MODEL_CARD.md").write_text(card)


# ----------------------------------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=Path("genalign/assets/tool-lm"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--vocab-size", type=int, default=512)
    parser.add_argument("--direct-add", type=float, default=0.6, help="sums answered without the tool")
    parser.add_argument("--direct-mul", type=float, default=0.1, help="products guessed without the tool")
    parser.add_argument("--bad-call", type=float, default=0.15, help="first calls with a wrong operator or bad JSON")
    parser.add_argument("--retry", type=float, default=0.5, help="after a failed call: retry (else guess)")
    parser.add_argument("--round-down", type=float, default=0.6, help="8-digit results answered rounded down")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (results depend on it)")
    parser.add_argument("--eval-size", type=int, default=500)
    parser.add_argument("--pass-size", type=int, default=200)
    parser.add_argument("--measure-only", action="store_true", help="measure the model in --output; train nothing")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    eval_rows = calculator_arithmetic(args.eval_size, seed=args.seed, split="eval", **TASK_ARGS)
    if args.measure_only:
        print(json.dumps(measure(args.output, eval_rows, args.seed, args.pass_size), indent=2))
        return

    started = time.perf_counter()
    train_rows = calculator_arithmetic(100_000, seed=args.seed, split="train", **TASK_ARGS)
    tokenizer = build_tokenizer(tokenizer_corpus(train_rows[:20_000], args), args.vocab_size)
    renderer, environments = ChatRenderer(tokenizer), EnvironmentSet(ENVIRONMENT)
    renderer.check()
    model = build_model(len(tokenizer), pad_id=tokenizer.pad_token_id, eos_id=tokenizer.eos_token_id,
                        max_positions=MAX_POSITIONS)  # fmt: skip
    num_params = sum(p.numel() for p in model.parameters())
    rng = random.Random(args.seed)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return make_batch(rng.sample(train_rows, args.batch_size), renderer, environments, rng, args)

    _, losses = train_causal_lm(model, batch, steps=args.steps, lr=args.lr, pad_id=tokenizer.pad_token_id)
    train_seconds = time.perf_counter() - started

    args.output.mkdir(parents=True, exist_ok=True)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(args.output, safe_serialization=True)
    tokenizer.save_pretrained(args.output)
    results = measure(args.output, eval_rows, args.seed, args.pass_size)
    results |= {"train_seconds": train_seconds, "final_loss": statistics.fmean(losses[-100:]), "threads": args.threads}
    print(json.dumps(results, indent=2))
    log = {"args": {k: str(v) for k, v in vars(args).items()}, "results": results, "loss_every_100": losses[::100]}
    (args.output / "pretraining_log.json").write_text(json.dumps(log, indent=2))
    write_model_card(args.output, args, results, num_params, len(tokenizer))
    print(f"saved to {args.output}")


if __name__ == "__main__":
    main()
