"""Peak memory of a teacher's scoring pass (``algorithm.teacher: {source: model}``) against a naive full-logits pass, at
a vocabulary of 50,000 tokens: the teacher keeps the chunked bound of the policy's own log-prob pass.

Setting: a Qwen2-architecture student (hidden 64, 2 layers) and teacher (hidden 128, 4 layers) sharing a word-level
tokenizer of 50,000 tokens (:mod:`genalign.policies.lm.tiny`), float32, CPU, a batch of 4 completions of 512 tokens
after 16-token prompts (2,048 scored tokens), no gradient (a teacher is frozen). Two paths, each in its own worker
process so that each peak is its own:

* ``teacher``: :meth:`genalign.teachers.local.LocalTeacher.judge` of the teacher model (log-probs and entropy of the
  student's tokens), which scores through the family's chunked head (``policy.logprob_chunk_size`` = 256 tokens of
  logits at a time);
* ``naive``: the teacher model's full ``[B, P + C, V]`` logits, ``log_softmax`` and a gather (what scoring a teacher
  costs without the chunked head; :func:`genalign.policies.lm.logprobs.naive_completion_logprobs`).

Peak memory is the worker's peak resident set size (``ru_maxrss``) minus its resident size just before the pass (both
models are loaded before); glibc is told to return large freed buffers at once (as in ``bench_lm_step.py``). Target:
teacher peak <= 30 % of the naive peak. The two paths' log-probs must agree.

Run: ``HF_HUB_OFFLINE=1 python benchmarks/bench_teacher_memory.py [--output benchmarks/teacher_memory_results.md]``
(about a minute); ``--smoke``: vocabulary 2,000, 2 completions of 16 tokens, both paths in this process, nothing
written (the figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHAPES = {  # Qwen2 shapes (tied embeddings)
    "student": {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 128},
    "teacher": {"hidden_size": 128, "num_layers": 4, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 256},
}
FULL = {"vocab": 50_000, "batch": 4, "prompt": 16, "completion": 512, "chunk": 256}
SMOKE = {"vocab": 2_000, "batch": 2, "prompt": 8, "completion": 16, "chunk": 8}


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build_models(folder: Path, vocab: int) -> dict[str, Path]:
    """The student and teacher folders (one tokenizer of ``vocab`` words)."""
    from genalign.policies.lm.tiny import build_tiny_causal_lm, build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(vocab)
    return {
        name: build_tiny_causal_lm(folder / name, vocab_size=vocab, tokenizer=tokenizer, seed=seed, **SHAPES[name])
        for seed, name in enumerate(SHAPES)
    }


def measure(mode: str, folders: dict[str, Path], sizes: dict[str, int]) -> dict:
    """One pass of ``mode`` (``teacher`` or ``naive``) over a fixed batch; its peak memory, time and log-prob sum."""
    import torch

    from genalign.policies.base import Rollout
    from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
    from genalign.policies.lm.logprobs import naive_completion_logprobs
    from genalign.teachers.build import build_teacher
    from genalign.teachers.config import TeacherConfig

    torch.set_num_threads(1)
    config = CausalLMPolicyConfig(model=str(folders["student"]), logprob_chunk_size=sizes["chunk"])
    policy = build_policy(config)
    teacher = build_teacher(TeacherConfig(source="model", model=str(folders["teacher"])), policy,
                            batch_size=sizes["batch"])  # fmt: skip
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
    teacher_model = teacher.run(lambda module: module)
    base, start = rss_mb(), time.perf_counter()
    if mode == "teacher":
        logp = teacher.judge(rollout, frozenset({"teacher_action_logp", "teacher_entropy"}))["teacher_action_logp"]
    else:
        with torch.no_grad():
            logp = naive_completion_logprobs(teacher_model, prompt, torch.ones_like(prompt), completion, mask,
                                             temperature=1.0)  # fmt: skip
    seconds = time.perf_counter() - start
    return {"mode": mode, "seconds": seconds, "base_rss_mb": base, "peak_rss_mb": peak_rss_mb(),
            "logp_sum": float(logp.sum())}  # fmt: skip


def run_worker(script: str, args: list[str], mode: str, timeout: int = 900) -> dict:
    """The JSON result (the last ``{...}`` line of stdout) of ``script --worker mode *args`` run in a fresh process,
    with the allocator settings every memory benchmark measures under; a failed worker raises with its stderr."""
    # A fixed mmap threshold makes glibc return every large freed buffer to the OS at once, so the peak resident size
    # measures live tensors rather than allocator fragmentation (the same setting for both paths).
    env = os.environ | {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    command = [sys.executable, script, "--worker", mode, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"worker {mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def spawn(folders: dict[str, Path], mode: str) -> dict:
    """``measure(mode)`` in a fresh worker process."""
    return run_worker(__file__, ["--student", str(folders["student"]), "--teacher", str(folders["teacher"])], mode)


def render(results: dict[str, dict], sizes: dict[str, int], smoke: bool) -> str:
    import torch
    import transformers

    naive, teacher = results["naive"], results["teacher"]
    naive_peak = naive["peak_rss_mb"] - naive["base_rss_mb"]
    teacher_peak = teacher["peak_rss_mb"] - teacher["base_rss_mb"]
    tokens = sizes["batch"] * sizes["completion"]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    header = (
        f"Measured by `python benchmarks/bench_teacher_memory.py{' --smoke' if smoke else ''}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: CPU ({platform.processor() or platform.machine()}), "
        f"1 torch thread, torch {torch.__version__}, transformers {transformers.__version__}; load average at start "
        f"{load}. Teacher Qwen2 (hidden 128, 4 layers), vocabulary {sizes['vocab']:,}, {sizes['batch']} completions "
        f"x {sizes['completion']} tokens = {tokens:,} scored tokens after {sizes['prompt']}-token prompts, float32, "
        "no gradient; each path in its own process" + (" (smoke: one process; figures meaningless)" if smoke else "")
    )
    ratio = teacher_peak / naive_peak if naive_peak > 0 else float("nan")
    return "\n".join([
        header + ".", "",
        "| path | peak over start (MB) | time (s) |", "|---|---|---|",
        f"| naive full logits (teacher model, `[B, P + C, V]`) | {naive_peak:,.0f} | {naive['seconds']:.2f} |",
        f"| genalign teacher pass (chunk {sizes['chunk']} tokens, log-probs + entropy) | {teacher_peak:,.0f} | "
        f"{teacher['seconds']:.2f} |", "",
        f"Teacher / naive peak: {ratio:.0%} (target <= 30%). Same values: |sum logp naive - teacher| = "
        f"{abs(naive['logp_sum'] - teacher['logp_sum']):.2e}.",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one process, nothing written")
    parser.add_argument("--output", type=Path, help="also write the table to this markdown file")
    parser.add_argument("--worker", choices=["teacher", "naive"], help=argparse.SUPPRESS)
    parser.add_argument("--student", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--teacher", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(measure(args.worker, {"student": args.student, "teacher": args.teacher}, FULL)))
        return 0
    sizes = SMOKE if args.smoke else FULL
    with tempfile.TemporaryDirectory(prefix="bench_teacher_memory_") as folder:
        folders = build_models(Path(folder), sizes["vocab"])
        if args.smoke:
            results = {mode: measure(mode, folders, sizes) for mode in ("naive", "teacher")}
        else:
            results = {mode: spawn(folders, mode) for mode in ("naive", "teacher")}
    table = render(results, sizes, args.smoke)
    print(table)
    if args.output is not None and not args.smoke:
        args.output.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
