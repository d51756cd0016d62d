"""Send SIGTERM or SIGINT to a training run at random steps, again and again: each stop saves the step reached, and the
resumed run equals the uninterrupted one bit for bit.

An uninterrupted run of the LM demo is the reference (a checkpoint every 5 steps, an evaluation every 4). Then one run
directory goes through the trials: each starts ``genalign train`` (from trial 1 on with ``run.resume=latest``), waits
until a random step 1-3 steps after the previous stop has been logged plus a random fraction of a step, and sends
SIGTERM or SIGINT (alternating). Checked per trial: exit code 75, the shutdown line naming the step and its
checkpoint, a complete checkpoint of the last logged step that verifies against its manifest, no temporary folder, a
resume that starts exactly there, and the ``metrics.jsonl`` records of the steps since the previous stop equal to the
reference's (``time/`` keys excluded). A final resume trains to the end; then every metrics and evaluation record and
the final weights are compared with the reference.

    HF_HUB_OFFLINE=1 python benchmarks/bench_signal_trials.py [--trials 20] [--out benchmarks/signal_trials_results.md]
    HF_HUB_OFFLINE=1 python benchmarks/bench_signal_trials.py --smoke     # 2 trials, 9 steps (run by the test suite)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from genalign.trainer.checkpoint import TEMPORARY_PREFIX, checkpoint_root, verify_checkpoint  # noqa: E402

CONFIG = ROOT / "configs" / "demo_arith_grpo.yaml"
INTERRUPTED = 75  # genalign.trainer.shutdown.TrainingInterrupted.exit_code


def command(output_dir: Path, max_steps: int, resume: bool) -> list[str]:
    overrides = [
        f"run.output_dir={output_dir}", f"run.max_steps={max_steps}", "run.save_every=5", "run.keep_last=3",
        "run.progress_bar=false", "run.num_threads=1", "run.sample_every=0", "eval.at_start=false", "eval.every=4",
        "eval.num_prompts=8", "algorithm.prompts_per_step=8",
    ]  # fmt: skip
    return [sys.executable, "-m", "genalign.cli", "train", str(CONFIG), *overrides, *(["run.resume=latest"] * resume)]


def records(path: Path) -> list[dict]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in lines if line]


def logged_steps(path: Path) -> int:
    try:
        return sum(1 for line in path.read_text().splitlines() if line.endswith("}"))
    except FileNotFoundError:
        return 0


def temporary_folders(output_dir: Path) -> list[str]:
    root = checkpoint_root(output_dir)
    return [p.name for p in root.iterdir() if p.name.startswith(TEMPORARY_PREFIX)] if root.is_dir() else []


def trials(count: int, max_steps: int, seed: int) -> dict:
    rng = random.Random(seed)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    work = Path(tempfile.mkdtemp(prefix="genalign-signals-"))
    reference, output_dir = work / "reference", work / "run"
    subprocess.run(command(reference, max_steps, False), cwd=ROOT, env=env, check=True, capture_output=True)
    expected = records(reference / "metrics.jsonl")
    results: list[dict] = []
    stopped_at = 0
    for trial in range(count):
        name = ("SIGTERM", "SIGINT")[trial % 2]
        target = stopped_at + rng.randint(1, 3)
        if target >= max_steps:
            break
        process = subprocess.Popen(command(output_dir, max_steps, trial > 0), cwd=ROOT, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        while logged_steps(output_dir / "metrics.jsonl") < target and process.poll() is None:
            time.sleep(0.01)
        delay = rng.uniform(0.0, 0.3)  # a random moment in the next step (a step takes about 0.2-0.4 s here)
        time.sleep(delay)
        sent = time.perf_counter()
        process.send_signal(getattr(signal, name))
        out, err = process.communicate(timeout=300)
        exit_seconds = time.perf_counter() - sent
        steps = records(output_dir / "metrics.jsonl")
        reached = steps[-1]["step"] if steps else 0
        line = re.search(rf"received {name} at step (\d+): saved checkpoint step-(\d+); resume with run\.resume=latest",
                         err)  # fmt: skip
        checkpoint = checkpoint_root(output_dir) / f"step-{reached}"
        resumed = (
            trial == 0
            or f"resumed from {checkpoint_root(output_dir) / f'step-{stopped_at}'} at step {stopped_at}" in out
        )
        result = {
            "trial": trial, "signal": name, "sent_after_step": target, "delay_s": round(delay, 2),
            "exit_code": process.returncode, "stopped_at": reached, "exit_s": round(exit_seconds, 2),
            "line": bool(line and int(line[1]) == reached and int(line[2]) == reached),
            "checkpoint_verifies": checkpoint.is_dir() and verify_checkpoint(checkpoint) is None,
            "temporary_folders": temporary_folders(output_dir), "resumed_exactly": resumed,
            "identical_since_previous_stop": steps[stopped_at:reached] == expected[stopped_at:reached],
        }  # fmt: skip
        if not (result["line"] and result["exit_code"] == INTERRUPTED):
            result["stderr_tail"] = err[-800:]
        results.append(result)
        print(json.dumps(result), flush=True)
        stopped_at = reached
    final = subprocess.run(command(output_dir, max_steps, True), cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=900)  # fmt: skip
    from safetensors.torch import load_file

    weights = [load_file(str(d / "checkpoints" / f"step-{max_steps}" / "policy" / "model.safetensors"))
               for d in (reference, output_dir)]  # fmt: skip
    summary = {
        "trials": len(results),
        "exit_code_75": sum(r["exit_code"] == INTERRUPTED for r in results),
        "shutdown_line_printed": sum(r["line"] for r in results),
        "checkpoint_of_the_step_reached": sum(r["checkpoint_verifies"] for r in results),
        "resumed_exactly_at_the_stop": sum(r["resumed_exactly"] for r in results),
        "steps_identical_to_uninterrupted": sum(r["identical_since_previous_stop"] for r in results),
        "trials_leaving_temporary_folders": sum(bool(r["temporary_folders"]) for r in results),
        "slowest_exit_after_signal_s": max((r["exit_s"] for r in results), default=0),
        "final_run_exit_code": final.returncode,
        "all_metrics_identical": records(output_dir / "metrics.jsonl") == expected,
        "all_evaluations_identical": records(output_dir / "eval.jsonl") == records(reference / "eval.jsonl"),
        "final_weights_identical": all(bool((weights[0][k] == weights[1][k]).all()) for k in weights[0]),
        "steps": max_steps,
    }
    return {"summary": summary, "trials": results, "final_stderr_tail": final.stderr[-800:] if final.returncode else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="2 trials, 9 steps (the test suite's run)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as markdown here")
    args = parser.parse_args()
    count = 2 if args.smoke else args.trials
    # a trial signals 1-3 steps after the previous stop and stops at most one step later: the smoke run's two trials
    # stop by step 8, before its end (step 9)
    results = trials(count, max_steps=3 * count + 3 if args.smoke else 4 * count + 4, seed=args.seed)
    summary = results["summary"]
    print(json.dumps(summary, indent=2))
    if results["final_stderr_tail"]:
        print(results["final_stderr_tail"])
    if args.out:
        rows = "".join(
            f"| {t['trial']} | {t['signal']} | {t['sent_after_step']} + {t['delay_s']} s | {t['exit_code']} "
            f"| {t['stopped_at']} | {t['exit_s']} | {t['line']} | {t['checkpoint_verifies']} | {t['resumed_exactly']} "
            f"| {t['identical_since_previous_stop']} |\n"
            for t in results["trials"]
        )
        args.out.write_text(
            "# SIGTERM / SIGINT trials\n\n`HF_HUB_OFFLINE=1 python benchmarks/bench_signal_trials.py --trials "
            f"{count} --out {args.out}` (LM demo, {summary['steps']} steps, a checkpoint every 5 steps and an "
            "evaluation every 4; each trial signals 1-3 steps after the previous stop plus 0-0.3 s).\n\n"
            f"```\n{json.dumps(summary, indent=2)}\n```\n\n| trial | signal | sent after step + delay | exit code "
            "| stopped at step | exit after the signal (s) | shutdown line | checkpoint verifies | resumed at the stop "
            f"| steps identical to the uninterrupted run |\n|---|---|---|---|---|---|---|---|---|---|\n{rows}"
        )
    n = summary["trials"]
    ok = (n == count and summary["exit_code_75"] == n and summary["shutdown_line_printed"] == n
          and summary["checkpoint_of_the_step_reached"] == n and summary["resumed_exactly_at_the_stop"] == n
          and summary["steps_identical_to_uninterrupted"] == n and summary["trials_leaving_temporary_folders"] == 0
          and summary["final_run_exit_code"] == 0 and summary["all_metrics_identical"]
          and summary["all_evaluations_identical"] and summary["final_weights_identical"])  # fmt: skip
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
