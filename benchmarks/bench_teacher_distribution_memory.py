"""Peak memory of the full-distribution teacher pass (``teacher_vocab_reverse_kl`` / ``teacher_vocab_forward_kl``,
:mod:`genalign.teachers.distribution`) against a naive per-token KL over full logits, at a vocabulary of 50,000 tokens.

Setting: the models, tokenizer and batch of ``bench_teacher_memory.py`` (a Qwen2 student, hidden 64, 2 layers, and a
teacher, hidden 128, 4 layers; 4 completions of 512 tokens after 16-token prompts; float32, CPU, no gradient). Two
paths, each in its own worker process:

* ``distribution``: :meth:`genalign.teachers.local.LocalTeacher.judge` asked for both vocabulary KLs: each model's
  backbone once (its hidden states), then both heads over ``chunk`` action positions at a time;
* ``naive``: both models' full ``[B, P + C, V]`` logits, their log-softmax and the two KLs over the vocabulary.

Peak memory: the worker's peak resident set size minus its resident size just before the pass (as in
``bench_teacher_memory.py``). Target: distribution peak <= 30 % of the naive peak; the two paths' KLs must agree.

Run: ``HF_HUB_OFFLINE=1 python benchmarks/bench_teacher_distribution_memory.py [--output
benchmarks/teacher_distribution_memory_results.md]``; ``--smoke``: tiny sizes, one process, nothing written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench_teacher_memory import FULL, SMOKE, build_models, peak_rss_mb, rss_mb, run_worker

WANTED = frozenset({"teacher_scored", "teacher_action_logp", "teacher_vocab_reverse_kl", "teacher_vocab_forward_kl"})


def measure(mode: str, folders: dict[str, Path], sizes: dict[str, int]) -> dict:
    """One pass of ``mode`` over a fixed batch: its peak memory, time and the sums of both KLs."""
    import torch

    from genalign.policies.base import Rollout
    from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
    from genalign.policies.lm.logprobs import position_ids_from_mask
    from genalign.teachers.build import build_teacher
    from genalign.teachers.config import TeacherConfig
    from genalign.teachers.distribution_options import DistributionOptions

    torch.set_num_threads(1)
    policy = build_policy(CausalLMPolicyConfig(model=str(folders["student"]), logprob_chunk_size=sizes["chunk"]))
    options = DistributionOptions(chunk_size=sizes["chunk"])
    teacher = build_teacher(TeacherConfig(source="model", model=str(folders["teacher"]), distribution=options),
                            policy, batch_size=sizes["batch"])  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    shape = (sizes["batch"], sizes["completion"])
    prompt = torch.randint(4, sizes["vocab"], (sizes["batch"], sizes["prompt"]), generator=generator)
    completion = torch.randint(4, sizes["vocab"], shape, generator=generator)
    mask = torch.ones(shape)
    rollout = Rollout(
        rows=[{"prompt": ""}] * sizes["batch"], outputs=[""] * sizes["batch"],
        group_ids=torch.zeros(sizes["batch"], dtype=torch.long), old_logp=torch.zeros(shape), action_mask=mask,
        per_sample={"prompt_ids": prompt, "prompt_mask": torch.ones_like(prompt), "completion_ids": completion,
                    "completion_mask": mask},
    )  # fmt: skip
    models = {"student": policy.hf_model, "teacher": teacher.run(lambda module: module)}
    base, start = rss_mb(), time.perf_counter()
    if mode == "distribution":
        values = teacher.judge(rollout, WANTED)
        reverse, forward = values["teacher_vocab_reverse_kl"].sum(), values["teacher_vocab_forward_kl"].sum()
    else:
        ids = torch.cat([prompt, completion], dim=1)
        attention = torch.ones_like(ids)
        positions = position_ids_from_mask(attention)
        width = prompt.shape[1]
        with torch.no_grad():
            logs = {
                name: model(input_ids=ids, attention_mask=attention, position_ids=positions)
                .logits[:, width - 1 : -1]
                .float()
                .log_softmax(-1)
                for name, model in models.items()
            }  # each [B, C, V]
            gap = logs["student"] - logs["teacher"]
            reverse = (logs["student"].exp() * gap).sum()
            forward = -(logs["teacher"].exp() * gap).sum()
    seconds = time.perf_counter() - start
    return {"mode": mode, "seconds": seconds, "base_rss_mb": base, "peak_rss_mb": peak_rss_mb(),
            "reverse": float(reverse), "forward": float(forward)}  # fmt: skip


def spawn(folders: dict[str, Path], mode: str) -> dict:
    """``measure(mode)`` in a fresh worker process."""
    args = ["--student", str(folders["student"]), "--teacher", str(folders["teacher"])]
    return run_worker(__file__, args, mode, timeout=1800)


def render(results: dict[str, dict], sizes: dict[str, int], smoke: bool) -> str:
    import torch

    naive, ours = results["naive"], results["distribution"]
    naive_peak = naive["peak_rss_mb"] - naive["base_rss_mb"]
    our_peak = ours["peak_rss_mb"] - ours["base_rss_mb"]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    header = (
        f"Measured by `python benchmarks/bench_teacher_distribution_memory.py{' --smoke' if smoke else ''}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: CPU, 1 torch thread, torch {torch.__version__}; load "
        f"average at start {load}. Student Qwen2 (hidden 64, 2 layers) and teacher (hidden 128, 4 layers), vocabulary "
        f"{sizes['vocab']:,}, {sizes['batch']} completions x {sizes['completion']} tokens after {sizes['prompt']}-token "
        "prompts, float32, no gradient; each path in its own process"
        + (" (smoke: figures meaningless)" if smoke else "")
    )
    ratio = our_peak / naive_peak if naive_peak > 0 else float("nan")
    return "\n".join([
        header + ".", "",
        "| path | peak over start (MB) | time (s) |", "|---|---|---|",
        f"| naive: both models' full logits `[B, C, V]`, log-softmax, both KLs | {naive_peak:,.0f} | "
        f"{naive['seconds']:.2f} |",
        f"| genalign full-distribution pass (chunk {sizes['chunk']} positions, both KLs) | {our_peak:,.0f} | "
        f"{ours['seconds']:.2f} |", "",
        f"Distribution pass / naive peak: {ratio:.0%} (target <= 30%). Same values: reverse-KL sums {naive['reverse']:.4f}"
        f" vs {ours['reverse']:.4f}, forward-KL sums {naive['forward']:.4f} vs {ours['forward']:.4f}.",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one process, nothing written")
    parser.add_argument("--output", type=Path, help="also write the table to this markdown file")
    parser.add_argument("--worker", choices=["distribution", "naive"], help=argparse.SUPPRESS)
    parser.add_argument("--student", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--teacher", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(measure(args.worker, {"student": args.student, "teacher": args.teacher}, FULL)))
        return 0
    sizes = SMOKE if args.smoke else FULL
    with tempfile.TemporaryDirectory(prefix="bench_teacher_distribution_") as folder:
        folders = build_models(Path(folder), sizes["vocab"])
        if args.smoke:
            results = {mode: measure(mode, folders, sizes) for mode in ("naive", "distribution")}
        else:
            results = {mode: spawn(folders, mode) for mode in ("naive", "distribution")}
    table = render(results, sizes, args.smoke)
    print(table)
    if args.output is not None and not args.smoke:
        args.output.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
