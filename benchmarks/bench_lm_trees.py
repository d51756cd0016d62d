"""Shared-prefix LM tree rollouts against independent sampling at 16 completions per prompt (results in
benchmarks/lm_trees_results.md).

For each model and split schedule, the static KV-cache engine samples 16 completions per prompt, independently
(``StaticCacheEngine``) or as the 16 leaves of one tree (``TreeCacheEngine``, genalign/policies/lm/engines/tree.py), and the
script reports per leaf: the tokens the sampler generated (a shared prefix token counts once), the tokens the leaf
holds, wall time, and what sharing costs: distinct completions per group and, on the arithmetic model, the accuracy
and the share of groups whose rewards are not all equal (groups that carry a GRPO signal).

Models: ``builtin:arith-lm`` (the LM demo: 3-digit sums, completions of about 4 tokens) and a Llama built from a
config with random weights (512-word vocabulary, hidden 256, 4 layers) decoding 64 tokens, where completions run to
the length limit, so generated tokens follow the split schedule exactly (``LMTreePlan.tokens_per_leaf``).

Usage::

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 python benchmarks/bench_lm_trees.py [--prompts 32] [--repeats 3] [--json F]
    HF_HUB_OFFLINE=1 python benchmarks/bench_lm_trees.py --smoke    # seconds: 2 prompts, 1 repeat, 2 trees a model
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from genalign.policies.lm.engines import SamplingParams  # noqa: E402
from genalign.policies.lm.engines.static import StaticCacheEngine  # noqa: E402
from genalign.policies.lm.engines.tree import LMTreePlan, TreeCacheEngine  # noqa: E402

LEAVES = 16


@dataclass(frozen=True)
class Schedule:
    name: str
    plan: LMTreePlan | None  # None: 16 independent samples


ARITH_SCHEDULES = [
    Schedule("independent (16 samples)", None),
    Schedule("split 1,2,3,4 × 2", LMTreePlan((1, 2, 3, 4), (2, 2, 2, 2))),
    Schedule("split 1,2 × 4,4", LMTreePlan((1, 2), (4, 4))),
    Schedule("split 2 × 16", LMTreePlan((2,), (16,))),
    Schedule("entropy ≥ 0.5 from 1,2 (window 2) × 4,4", LMTreePlan((1, 2), (4, 4), 0.5, 2)),
]
LLAMA_SCHEDULES = [
    Schedule("independent (16 samples)", None),
    Schedule("split 4,8,12,16 × 2", LMTreePlan((4, 8, 12, 16), (2, 2, 2, 2))),
    Schedule("split 8,16,24,32 × 2 (BranchGRPO-like)", LMTreePlan((8, 16, 24, 32), (2, 2, 2, 2))),
    Schedule("split 16,32 × 4,4", LMTreePlan((16, 32), (4, 4))),
    Schedule("split 32 × 16", LMTreePlan((32,), (16,))),
    Schedule("split 32,40,48,56 × 2", LMTreePlan((32, 40, 48, 56), (2, 2, 2, 2))),
]


@dataclass
class Result:
    model: str
    schedule: str
    generated_per_leaf: float
    completion_per_leaf: float
    ms_per_leaf: float
    distinct_per_group: float
    shared_prefix: float
    accuracy: float | None
    groups_with_signal: float | None
    bound_per_leaf: float | None


def random_llama(directory: Path):
    from genalign.policies.lm.tiny import build_tiny_causal_lm

    return build_tiny_causal_lm(
        directory, architecture="llama", vocab_size=512, hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=4,
        intermediate_size=512, seed=0,
    )  # fmt: skip


def load(path: str):
    from transformers import AutoModelForCausalLM

    from genalign.assets import model_location
    from genalign.policies.lm.tokenizer import load_tokenizer

    location = model_location(path)
    return AutoModelForCausalLM.from_pretrained(location).eval(), load_tokenizer(location)


def encode(tokenizer, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``[B, P]`` ids and mask."""
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    width = max(map(len, encoded))
    ids = torch.full((len(encoded), width), tokenizer.pad_token_id)
    mask = torch.zeros(len(encoded), width, dtype=torch.long)
    for row, seq in enumerate(encoded):
        ids[row, width - len(seq) :] = torch.tensor(seq)
        mask[row, width - len(seq) :] = 1
    return ids, mask


def sample(model, tokenizer, schedule: Schedule, ids, mask, params, seed: int):
    """``(completion ids [B 16, C], mask [B 16, C], generated tokens, seconds)``."""
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    if schedule.plan is None:
        out = StaticCacheEngine(model, tokenizer).generate(
            ids.repeat_interleave(LEAVES, 0), mask.repeat_interleave(LEAVES, 0), params, generator
        )
        generated = int(out.completion_mask.sum())
    else:
        tree = TreeCacheEngine(model, tokenizer).generate_tree(ids, mask, params, generator, schedule.plan)
        out, generated = tree.generation, tree.generated_tokens
    return out.completion_ids, out.completion_mask, generated, time.perf_counter() - start


def shared_prefix_fraction(completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> float:
    """Mean over the pairs of leaves of a group of their common prefix length over their mean length."""
    ids = torch.where(completion_mask > 0, completion_ids, -1)  # [16, C]
    same = (ids[:, None] == ids[None, :]) & (ids[:, None] >= 0)  # [16, 16, C]
    common = same.long().cumprod(dim=2).sum(dim=2).float()  # [16, 16]
    lengths = completion_mask.sum(1)  # [16]
    ratio = common / ((lengths[:, None] + lengths[None, :]) / 2).clamp(min=1)
    pairs = ~torch.eye(len(ids), dtype=torch.bool)
    return float(ratio[pairs].mean())


def measure(model_name, model, tokenizer, schedule, rows, params, repeats: int) -> Result:
    """Mean over ``repeats`` rollouts of all ``rows`` (one warm-up rollout first)."""
    ids, mask = encode(tokenizer, [row["prompt"] for row in rows])
    leaves = len(rows) * LEAVES
    sample(model, tokenizer, schedule, ids, mask, params, seed=10_000)  # warm-up
    generated = held = seconds = distinct = shared = correct = signal = 0.0
    for repeat in range(repeats):
        completion_ids, completion_mask, gen, sec = sample(model, tokenizer, schedule, ids, mask, params, seed=repeat)
        generated, held, seconds = generated + gen, held + float(completion_mask.sum()), seconds + sec
        lengths = completion_mask.sum(1).long().tolist()
        texts = [
            tokenizer.decode(row[:n].tolist(), skip_special_tokens=True) for row, n in zip(completion_ids, lengths)
        ]
        groups = [texts[g * LEAVES : (g + 1) * LEAVES] for g in range(len(rows))]
        distinct += sum(len(set(group)) for group in groups) / len(rows)
        shared += sum(
            shared_prefix_fraction(
                completion_ids[g * LEAVES : (g + 1) * LEAVES], completion_mask[g * LEAVES : (g + 1) * LEAVES]
            )
            for g in range(len(rows))
        ) / len(rows)
        if "answer" in rows[0]:
            hits = [[float(t.strip() == row["answer"]) for t in group] for group, row in zip(groups, rows)]
            correct += sum(map(sum, hits)) / leaves
            signal += sum(0 < sum(h) < LEAVES for h in hits) / len(rows)
    arith = "answer" in rows[0]
    bound = schedule.plan.tokens_per_leaf(params.max_new_tokens) if schedule.plan else params.max_new_tokens
    return Result(
        model=model_name,
        schedule=schedule.name,
        generated_per_leaf=generated / (repeats * leaves),
        completion_per_leaf=held / (repeats * leaves),
        ms_per_leaf=1000 * seconds / (repeats * leaves),
        distinct_per_group=distinct / repeats,
        shared_prefix=shared / repeats,
        accuracy=correct / repeats if arith else None,
        groups_with_signal=signal / repeats if arith else None,
        bound_per_leaf=None if arith else bound,
    )


def arith_rows(count: int) -> list[dict]:
    from genalign.data.procedural import PROCEDURAL_TASKS

    return PROCEDURAL_TASKS.get("arithmetic")(size=count, seed=0, digits=3, split="eval")


def table(results: list[Result]) -> str:
    lines = [
        "| model | schedule (16 leaves) | generated tokens / leaf | fewer than independent | tokens held / leaf | "
        "ms / leaf | time vs independent | distinct / group | prefix shared by a pair | accuracy | groups with signal |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = {r.model: r for r in results if r.schedule.startswith("independent")}
    fmt = lambda x, spec: "—" if x is None else format(x, spec)  # noqa: E731
    for r in results:
        b = base[r.model]
        lines.append(
            f"| {r.model} | {r.schedule} | {r.generated_per_leaf:.2f} | "
            f"{100 * (1 - r.generated_per_leaf / b.generated_per_leaf):.0f} % | {r.completion_per_leaf:.2f} | "
            f"{r.ms_per_leaf:.3f} | {r.ms_per_leaf / b.ms_per_leaf:.2f}x | {r.distinct_per_group:.1f} | {100 * r.shared_prefix:.0f} % | "
            f"{fmt(r.accuracy, '.3f')} | {fmt(r.groups_with_signal, '.2f')} |"
        )
    return "\n".join(lines)


def run(args) -> list[Result]:
    results: list[Result] = []
    arith_model, arith_tok = load("builtin:arith-lm")
    rows = arith_rows(args.prompts)
    eos = (arith_tok.eos_token_id,)
    params = SamplingParams(max_new_tokens=6, temperature=1.0, eos_token_ids=eos, pad_token_id=arith_tok.pad_token_id)
    schedules = ARITH_SCHEDULES[:2] + ARITH_SCHEDULES[-1:] if args.smoke else ARITH_SCHEDULES
    for schedule in schedules:
        results.append(measure("arith-lm", arith_model, arith_tok, schedule, rows, params, args.repeats))
    with tempfile.TemporaryDirectory() as tmp:
        llama, tokenizer = load(str(random_llama(Path(tmp) / "llama")))
    prompts = [{"prompt": f"what is {i} + {i + 1} ? answer :"} for i in range(args.prompts)]
    width = 24 if args.smoke else 64
    params = SamplingParams(max_new_tokens=width, temperature=1.0, eos_token_ids=(), pad_token_id=0)
    schedules = LLAMA_SCHEDULES[:2] if args.smoke else LLAMA_SCHEDULES
    for schedule in schedules:
        results.append(
            measure(f"llama-4x256 ({width} tokens)", llama, tokenizer, schedule, prompts, params, args.repeats)
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=32, help="prompts per rollout")
    parser.add_argument("--repeats", type=int, default=3, help="measured rollouts per schedule (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--smoke", action="store_true", help="2 prompts, 1 repeat, short llama completions")
    args = parser.parse_args()
    if args.smoke:
        args.prompts, args.repeats = 2, 1
    torch.set_num_threads(args.threads)
    results = run(args)
    print(f"prompts={args.prompts} repeats={args.repeats} threads={args.threads} leaves per prompt={LEAVES}")
    print(table(results))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))


if __name__ == "__main__":
    main()
