"""Start two trainers on one run directory at the same instant, again and again: exactly one may run.

Each trial starts two ``genalign train`` processes of the LM demo that, once their imports are done, wait for each
other at a file barrier and then enter ``train()`` together (the gap is measured), in two kinds of pairs: both fresh
in a new run directory (2 steps), then both with ``run.resume=latest`` on that run (to step 4). Checked: exactly one
process exits 0, the other exits 2 with the winner's PID and host in its message, ``metrics.jsonl`` holds every
step once, and no lock file or temporary folder is left.

    HF_HUB_OFFLINE=1 python benchmarks/bench_lock_trials.py [--trials 20] [--out benchmarks/lock_trials_results.md]
    HF_HUB_OFFLINE=1 python benchmarks/bench_lock_trials.py --smoke     # 1 pair of each kind (run by the test suite)

(``--trials N``: N pairs of each kind.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIG = ROOT / "configs" / "demo_arith_grpo.yaml"
LOCKED = 2  # genalign.trainer.run_lock.RunLockedError is a user error: one paragraph, exit code 2


def overrides(output_dir: Path, max_steps: int, resume: bool) -> list[str]:
    values = [
        f"run.output_dir={output_dir}", f"run.max_steps={max_steps}", "run.save_every=1", "run.progress_bar=false",
        "run.num_threads=1", "run.sample_every=0", "eval.at_start=false", "eval.every=0", "eval.num_prompts=4",
        "algorithm.prompts_per_step=4",
    ]  # fmt: skip
    return values + (["run.resume=latest"] if resume else [])


def child(barrier: Path, index: int, argv: list[str]) -> None:
    """One trainer: import everything, wait at the barrier for the other, then run ``genalign train``."""
    from genalign.cli import main

    (barrier / f"ready-{index}").touch()
    while not (barrier / f"ready-{1 - index}").exists():
        pass  # spin: both leave within microseconds of the second arrival
    (barrier / f"go-{index}").write_text(repr(time.time()))
    raise SystemExit(main(argv))


def pair(output_dir: Path, resume: bool, max_steps: int, env: dict) -> dict:
    barrier = Path(tempfile.mkdtemp(prefix="genalign-barrier-"))
    argv = ["train", str(CONFIG), *overrides(output_dir, max_steps, resume)]
    processes = [
        subprocess.Popen([sys.executable, __file__, "--child", str(barrier), str(index), "--", *argv], cwd=ROOT,
                         env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for index in (0, 1)
    ]  # fmt: skip
    outputs = [p.communicate(timeout=600) for p in processes]
    codes = [p.returncode for p in processes]
    gap_ms = abs(float((barrier / "go-0").read_text()) - float((barrier / "go-1").read_text())) * 1000
    shutil.rmtree(barrier, ignore_errors=True)
    winners = [i for i, code in enumerate(codes) if code == 0]
    losers = [i for i, code in enumerate(codes) if code == LOCKED]
    named = False
    if len(winners) == 1 and len(losers) == 1:
        who = f"PID {processes[winners[0]].pid} on host {socket.gethostname()}"
        named = who in outputs[losers[0]][1]
    steps = [json.loads(line)["step"] for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    leftovers = [p.name for p in (output_dir / "checkpoints").iterdir() if p.name.startswith(".tmp")]
    lock_left = (output_dir.parent / f".{output_dir.name}.lock").exists()
    result = {
        "kind": "resume" if resume else "fresh", "exit_codes": codes, "gap_ms": round(gap_ms, 2),
        "one_ran": len(winners) == 1 and len(losers) == 1, "holder_named": named,
        "steps_once": steps == list(range(1, max_steps + 1)), "leftovers": leftovers + (["lock file"] if lock_left else []),
    }  # fmt: skip
    if not (result["one_ran"] and named):
        result["stderr_tails"] = [err[-600:] for _, err in outputs]
    return result


def trials(count: int) -> dict:
    """``count`` trials; each: a fresh pair in a new run directory (2 steps), then a resumed pair on it (to step 4)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    work = Path(tempfile.mkdtemp(prefix="genalign-lock-"))
    results = []
    for trial in range(count):
        output_dir = work / f"run-{trial}"
        for resume, max_steps in ((False, 2), (True, 4)):
            results.append({"trial": trial, **pair(output_dir, resume, max_steps, env)})
            print(json.dumps(results[-1]), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    summary = {
        "pairs": len(results),
        "exactly_one_ran": sum(r["one_ran"] for r in results),
        "refusal_named_the_holder": sum(r["holder_named"] for r in results),
        "metrics_every_step_once": sum(r["steps_once"] for r in results),
        "pairs_with_leftovers": sum(bool(r["leftovers"]) for r in results),
        "largest_start_gap_ms": max(r["gap_ms"] for r in results),
    }
    return {"summary": summary, "pairs": results}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), int(sys.argv[3]), sys.argv[5:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20, help="pairs of each kind (fresh, resumed)")
    parser.add_argument("--smoke", action="store_true", help="1 pair of each kind (the test suite's run)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as markdown here")
    args = parser.parse_args()
    count = 1 if args.smoke else args.trials
    results = trials(count)
    summary = results["summary"]
    print(json.dumps(summary, indent=2))
    if args.out:
        rows = "".join(
            f"| {r['trial']} | {r['kind']} | {r['exit_codes']} | {r['gap_ms']} | {r['holder_named']} | {r['steps_once']} "
            f"| {', '.join(r['leftovers']) or '—'} |\n"
            for r in results["pairs"]
        )
        args.out.write_text(
            "# Two trainers on one run directory\n\n`HF_HUB_OFFLINE=1 python benchmarks/bench_lock_trials.py --trials "
            f"{count} --out {args.out}` (LM demo; each pair enters `train()` together after a file barrier; "
            "fresh pairs train 2 steps, then resumed pairs continue that run to step 4).\n\n"
            f"```\n{json.dumps(summary, indent=2)}\n```\n\n| trial | kind | exit codes | start gap (ms) | refusal names "
            f"the holder | every step once | leftovers |\n|---|---|---|---|---|---|---|\n{rows}"
        )
    pairs = summary["pairs"]
    ok = (summary["exactly_one_ran"] == pairs and summary["refusal_named_the_holder"] == pairs
          and summary["metrics_every_step_once"] == pairs and summary["pairs_with_leftovers"] == 0)  # fmt: skip
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
