"""Synchronous vs asynchronous (off-policy) rollouts on the LM demo, side by side in one run.

Setting: ``configs/demo_arith_grpo.yaml`` (GRPO on ``builtin:arith-lm``, the 0.86M-parameter arithmetic Llama), with
``algorithm.clip = off_policy`` ([323]) in both modes so that the objective is the same; the synchronous mode is
measured at 1 and at 2 intra-op threads (its best is the reference), the asynchronous mode
(``algorithm.async_rollout``: the next step's rollout sampled in a separate process while this step updates,
staleness 1) with 1 thread on each side. The runs are interleaved (seed by seed, mode by mode), each for the same
number of steps and samples; no checkpoints, one held-out evaluation at the end.

Reported: the steady-state step time (mean ``time/step_s`` over steps 2..N: waiting for the rollout, rewards,
advantages, update; the weight copy to the shared buffer, well under a millisecond here, is outside it), the ratio
async / best sync (target <= 0.75), the total wall time of each run (the rollout process's start-up included), and the
held-out accuracy after the same number of samples, mean ± standard error over the seeds.

Run: ``python benchmarks/bench_async.py [--steps 40] [--seeds 0 1 2] [--output benchmarks/async_results.md]`` on a
quiet machine (2 cores, a few minutes per run); ``--smoke`` runs 3 steps of one seed with small batches (seconds of
training, numbers meaningless) of one synchronous and one asynchronous mode (:data:`SMOKE_MODES`: the modes left out
differ from these only by ``run.num_threads``) and writes nothing into benchmarks/.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "demo_arith_grpo.yaml"
#: mode -> config overrides (key=value, as on the command line)
MODES = {
    "sync, 2 threads": ["run.num_threads=2"],
    "sync, 1 thread": ["run.num_threads=1"],
    "async, 1 + 1 threads": [
        "run.num_threads=1",
        "algorithm.async_rollout.enabled=true",
        "algorithm.async_rollout.worker_threads=1",
    ],
    "async, 2 + 1 threads": [  # the trainer keeps both cores; the rollout process competes for them
        "run.num_threads=2",
        "algorithm.async_rollout.enabled=true",
        "algorithm.async_rollout.worker_threads=1",
    ],
}

#: ``--smoke``: one mode of each kind, one thread each
SMOKE_MODES = ["sync, 1 thread", "async, 1 + 1 threads"]


def run_once(mode: str, seed: int, steps: int, out: Path, smoke: bool) -> dict[str, float]:
    """Train one mode for ``steps`` steps; return its step time, wall time and final held-out accuracy."""
    from genalign.config import load_config
    from genalign.trainer import train

    overrides = [
        *MODES[mode], f"run.seed={seed}", f"run.max_steps={steps}", "run.save_every=0", "run.sample_every=0",
        "run.progress_bar=false", "run.log_every=1000", f"run.output_dir={out}", "eval.every=0", "eval.at_start=false",
        "algorithm.clip.name=off_policy",  # the preset's clip bounds with the off-policy clip form
    ]  # fmt: skip
    if smoke:
        overrides += ["algorithm.prompts_per_step=4", "eval.num_prompts=16", "eval.batch_size=16",
                      "data.train.args.size=256"]  # fmt: skip
    config = load_config(CONFIG, overrides)
    started = time.perf_counter()
    final = train(config)
    wall = time.perf_counter() - started
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steady = records[1:] or records[:1]
    return {
        "step_s": statistics.fmean(r["time/step_s"] for r in steady),
        "rollout_s": statistics.fmean(r["time/rollout_s"] for r in steady),
        "update_s": statistics.fmean(r["time/update_s"] for r in steady),
        "worker_s": statistics.fmean(r.get("time/rollout_worker_s", float("nan")) for r in steady),
        "wall_s": wall,
        "accuracy": float(final["eval/accuracy"]),
        "staleness": statistics.fmean(r.get("rollout/staleness", 0.0) for r in records),
        "samples": float(sum(r["num_samples"] for r in records)),
    }


def mean_se(values: list[float]) -> tuple[float, float]:
    if any(v != v for v in values):  # NaN: a quantity this mode does not have
        return float("nan"), float("nan")
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan"))


def report(results: dict[str, list[dict[str, float]]], steps: int, seeds: list[int]) -> str:
    """The markdown report: one row per mode, then the async / best-sync step-time ratio."""
    lines = [
        "# Synchronous vs asynchronous rollouts (LM demo)",
        "",
        f"configs/demo_arith_grpo.yaml, clip = off_policy, {steps} steps, seeds {seeds}; mean ± standard error.",
        "",
        "Step time = sampling (rollout and rewards; async: waiting for the rollout process, then rewards) + update; "
        "worker rollout = the rollout process's own sampling time per step (async only).",
        "",
        "| mode | step time (s) | sampling (s) | update (s) | worker rollout (s) | wall time (s) | held-out accuracy "
        "| mean staleness | samples |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, runs in results.items():
        keys = ("step_s", "rollout_s", "update_s", "worker_s", "wall_s", "accuracy")
        cells = [mean_se([r[key] for r in runs]) for key in keys]
        text = " | ".join("—" if m != m else f"{m:.4f} ± {se:.4f}" for m, se in cells)
        lines.append(f"| {mode} | {text} | {runs[0]['staleness']:.2f} | {runs[0]['samples']:.0f} |")
    step_time = lambda m: mean_se([r["step_s"] for r in results[m]])[0]  # noqa: E731
    best = min((m for m in results if m.startswith("sync")), key=step_time)
    fastest = min((m for m in results if m.startswith("async")), key=step_time)
    ratios = [a["step_s"] / s["step_s"] for a, s in zip(results[fastest], results[best], strict=True)]
    ratio, se = mean_se(ratios)
    lines += ["", f"Step-time ratio, fastest async ({fastest}) / best sync ({best}): {ratio:.3f} ± {se:.3f} "
              "(target <= 0.75)."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "async_results.md")
    parser.add_argument("--smoke", action="store_true", help="3 steps, one seed, small batches, 2 modes; no file")
    args = parser.parse_args(argv)
    steps, seeds = (3, [0]) if args.smoke else (args.steps, args.seeds)
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in (SMOKE_MODES if args.smoke else MODES)}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:  # interleaved: every mode of a seed before the next seed
            for i, mode in enumerate(results):
                results[mode].append(run_once(mode, seed, steps, Path(tmp) / f"{seed}-{i}", args.smoke))
                print(f"seed {seed}, {mode}: {results[mode][-1]}", flush=True)
    text = report(results, steps, seeds)
    print(text)
    if not args.smoke:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
