"""Kill a training run with SIGKILL at random moments, again and again, and check that nothing is lost.

Each trial starts ``genalign train`` (the first from scratch, every later one with ``run.resume=latest``) on the LM
demo with a checkpoint after every step, kills it with SIGKILL after a random delay (anywhere from start-up to the
middle of a checkpoint write), then checks every complete checkpoint against its manifest (sizes and SHA-256 of every
file) and loads the newest one's states. After the last kill a final run resumes and trains to the end. Reported:
unloadable complete checkpoints (target 0), temporary folders left after a start (target 0), resumes that did not
continue from a checkpoint (target 0).

    HF_HUB_OFFLINE=1 python benchmarks/bench_kill_trials.py [--trials 20] [--out benchmarks/kill_trials_results.md]
    HF_HUB_OFFLINE=1 python benchmarks/bench_kill_trials.py --smoke     # 2 trials, seconds (run by the test suite)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from genalign.trainer.checkpoint import TEMPORARY_PREFIX, checkpoint_root, list_checkpoints, verify_checkpoint  # noqa: E402
from genalign.trainer.state_io import load_state  # noqa: E402

CONFIG = ROOT / "configs" / "demo_arith_grpo.yaml"


def command(output_dir: Path, max_steps: int, resume: bool) -> list[str]:
    overrides = [
        f"run.output_dir={output_dir}", f"run.max_steps={max_steps}", "run.save_every=1", "run.keep_last=3",
        "run.progress_bar=false", "run.num_threads=1", "eval.at_start=false", "eval.every=0", "eval.num_prompts=8",
        "algorithm.prompts_per_step=8",
    ]  # fmt: skip
    if resume:
        overrides.append("run.resume=latest")
    return [sys.executable, "-m", "genalign.cli", "train", str(CONFIG), *overrides]


def check_checkpoints(output_dir: Path) -> tuple[int, int, list[str]]:
    """``(complete, unloadable, reasons)``: every complete checkpoint verified, the newest one's states loaded."""
    complete = list_checkpoints(output_dir)
    reasons = [f"{p.name}: {r}" for p in complete if (r := verify_checkpoint(p)) is not None]
    if complete and not reasons:
        for name in ("optimizer", "scheduler", "policy_state", "trainer_state", "rng"):
            try:
                load_state(complete[-1] / name)
            except Exception as err:  # anything a damaged file can raise
                reasons.append(f"{complete[-1].name}/{name}: {err}")
    return len(complete), len(reasons), reasons


def temporary_folders(output_dir: Path) -> list[str]:
    root = checkpoint_root(output_dir)
    return [p.name for p in root.iterdir() if p.name.startswith(TEMPORARY_PREFIX)] if root.is_dir() else []


def trials(count: int, max_delay: float, seed: int) -> dict:
    rng = random.Random(seed)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    output_dir = Path(tempfile.mkdtemp(prefix="genalign-kill-")) / "run"
    max_steps = 10_000
    results = {"trials": [], "unloadable": 0, "leftover_temporary_after_start": 0, "failed_resumes": 0}
    for trial in range(count):
        resume = bool(list_checkpoints(output_dir))
        leftovers_before = temporary_folders(output_dir)
        process = subprocess.Popen(command(output_dir, max_steps, resume), cwd=ROOT, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
        delay = rng.uniform(0.2, max_delay)
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        log = process.communicate()[0]
        complete, unloadable, reasons = check_checkpoints(output_dir)
        resumed = "resumed from" in log
        started = "step " in log or resumed  # reached the training loop (a kill during start-up proves nothing)
        if resume and started and not resumed:
            results["failed_resumes"] += 1
        if leftovers_before and started:  # this start ran long enough to clean what the previous kill left
            results["leftover_temporary_after_start"] += len(set(leftovers_before) & set(temporary_folders(output_dir)))
        results["unloadable"] += unloadable
        results["trials"].append({"trial": trial, "delay_s": round(delay, 2), "resumed": resumed,
                                  "complete_checkpoints": complete, "unloadable": reasons,
                                  "temporary_after_kill": temporary_folders(output_dir)})  # fmt: skip
        print(json.dumps(results["trials"][-1]), flush=True)
    newest = list_checkpoints(output_dir)
    final_steps = int(newest[-1].name.split("-")[1]) + 2 if newest else 2
    final_command = command(output_dir, final_steps, bool(newest))
    if not newest:  # every kill came before the first checkpoint: start afresh over what the kills left
        final_command.append("run.overwrite=true")
    final = subprocess.run(final_command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    results["final_run_exit_code"] = final.returncode
    results["final_temporary_folders"] = temporary_folders(output_dir)
    records = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    results["final_steps_logged"] = [r["step"] for r in records][-3:]
    results["metrics_steps_contiguous"] = [r["step"] for r in records] == list(range(1, len(records) + 1))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--max-delay", type=float, default=12.0, help="Longest wait before the kill (seconds).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="2 trials (the test suite's run).")
    parser.add_argument("--out", type=Path, default=None, help="Write the summary as markdown here.")
    args = parser.parse_args()
    count, max_delay = (2, 8.0) if args.smoke else (args.trials, args.max_delay)
    results = trials(count, max_delay, args.seed)
    summary = {k: v for k, v in results.items() if k != "trials"}
    print(json.dumps(summary, indent=2))
    if args.out:
        rows = "".join(
            f"| {t['trial']} | {t['delay_s']} | {t['resumed']} | {t['complete_checkpoints']} | {len(t['unloadable'])} "
            f"| {', '.join(t['temporary_after_kill']) or '—'} |\n"
            for t in results["trials"]
        )
        args.out.write_text(
            "# SIGKILL trials\n\n`HF_HUB_OFFLINE=1 python benchmarks/bench_kill_trials.py --trials "
            f"{count} --out {args.out}` (LM demo, a checkpoint after every step, kills after a random 0.2-{max_delay} s)."
            f"\n\n```\n{json.dumps(summary, indent=2)}\n```\n\n| trial | kill after (s) | resumed | complete checkpoints "
            f"| unloadable | temporary folders after the kill |\n|---|---|---|---|---|---|\n{rows}"
        )
    ok = (results["unloadable"] == 0 and results["leftover_temporary_after_start"] == 0 and results["failed_resumes"] == 0
          and results["final_run_exit_code"] == 0 and not results["final_temporary_folders"]
          and results["metrics_steps_contiguous"])  # fmt: skip
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
