"""Part c: FSDP2 in one process: a short training run of the LM demo with ``run.distributed=fsdp`` launched through
``torchrun --nproc_per_node 1``, next to the same run with ``run.distributed=none``.

One process holds every shard, so the two runs should train alike: reported are each run's exit status, steps,
median step time and final loss, the largest per-step difference of loss, reward and gradient norm, and the largest
difference of the final weights (both checkpoints restored with ``load_policy_weights``, which reads sharded and
unsharded checkpoints). On a GPU the processes use CUDA (NCCL); on the CPU, ``run.cpu=true`` (gloo).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.gpu_check.common import PartResult, gpu_available

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "demo_arith_grpo.yaml"
TITLE = "FSDP2 in one process (torchrun --nproc_per_node 1)"


def _overrides(device: str, smoke: bool, output_dir: Path) -> list[str]:
    steps, prompts = (2, 4) if smoke else (5, 32)
    settings = [f"run.max_steps={steps}", f"algorithm.prompts_per_step={prompts}", "eval.at_start=false",
                "eval.every=0", "run.sample_every=0", "run.save_every=0", "run.progress_bar=false",
                f"run.output_dir={output_dir}", "run.num_threads=1" if smoke else "run.num_threads=4"]  # fmt: skip
    settings += ["data.train.args.size=256"] if smoke else []  # not the demo's 20,000 training prompts
    return settings + ([] if gpu_available(device) else ["run.cpu=true"])


def _train(command: list[str], timeout: int) -> tuple[int, str]:
    env = os.environ | {"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout} s"
    errors = [line for line in done.stderr.splitlines() if "Error:" in line and "ChildFailedError" not in line]
    return done.returncode, (errors[-1] if errors else done.stderr[-300:]).strip()


def _metrics(run: Path) -> list[dict]:
    file = run / "metrics.jsonl"
    return [json.loads(line) for line in file.read_text().splitlines()] if file.exists() else []


def _final_weights_difference(first: Path, second: Path) -> float:
    """Largest absolute difference of the trained parameters restored from the two runs' final checkpoints."""
    from genalign.runs import load_policy, open_run_or_checkpoint

    policies = []
    for run in (first, second):
        config, checkpoint = open_run_or_checkpoint(str(run), argument="run")
        config.run.cpu = True
        policies.append(load_policy(config, checkpoint))
    pairs = zip(policies[0].trainable_parameters(), policies[1].trainable_parameters(), strict=True)
    return max(float((a.detach() - b.detach()).abs().max()) for a, b in pairs) if policies else float("nan")


def fsdp_one_process(device: str, *, smoke: bool, workdir: Path) -> PartResult:
    """Part c on ``device`` (module docstring)."""
    start = time.perf_counter()
    runs = {"fsdp": workdir / "fsdp_run", "none": workdir / "plain_run"}
    launch = {
        "fsdp": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"],
        "none": [sys.executable],
    }
    outcome, rows = {}, []
    for strategy, run in runs.items():
        command = [*launch[strategy], "-m", "genalign.cli", "train", str(CONFIG), *_overrides(device, smoke, run)]
        outcome[strategy] = _train([*command, f"run.distributed={strategy}"], timeout=300)
        metrics = _metrics(run)
        step_s = statistics.median(m["time/step_s"] for m in metrics) if metrics else float("nan")
        final_loss = f"{metrics[-1]['loss']:.3e}" if metrics else "n/a"
        rows.append([strategy, str(outcome[strategy][0]), str(len(metrics)), f"{step_s:.3f}", final_loss])
    failed = {strategy: message for strategy, (code, message) in outcome.items() if code != 0}
    notes = [f"run.distributed={strategy} failed: {message}" for strategy, message in failed.items()]
    fsdp, plain = _metrics(runs["fsdp"]), _metrics(runs["none"])
    for key in ("loss", "reward/mean", "grad_norm"):
        if fsdp and len(fsdp) == len(plain):
            gap = max(abs(a[key] - b[key]) for a, b in zip(fsdp, plain, strict=True))
            notes.append(f"largest per-step |{key} fsdp - none|: {gap:.2e}")
    if not failed:
        notes.append(f"largest |final weight fsdp - none|: {_final_weights_difference(runs['fsdp'], runs['none']):.2e}")
    return PartResult(
        part="c",
        title=TITLE,
        status="failed" if failed else "ok",
        header=["run.distributed", "exit code", "steps", "median step (s)", "final loss"],
        rows=rows,
        notes=notes,
        seconds=time.perf_counter() - start,
    )
