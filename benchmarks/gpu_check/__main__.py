"""``python -m benchmarks.gpu_check [--device cuda] [--parts a b c d e] [--smoke] [--out FILE]``.

Runs each part in its own process (a crash, a hang or the memory of one part cannot touch the others), within a total
budget of 7.5 minutes, and writes the report to ``benchmarks/gpu_results.md`` (a GPU run) or to ``--out``. Without a
GPU every part is reported as skipped and no file is written unless ``--out`` names one; ``--smoke --device cpu`` runs
tiny sizes of the CPU-capable parts, writing nothing unless ``--out`` names a file.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.gpu_check import PARTS
from benchmarks.gpu_check.common import PartResult, environment, gpu_available
from benchmarks.gpu_check.report import render

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "gpu_results.md"
BUDGET_S = 450


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchmarks.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu with --smoke")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=list(PARTS), help="parts to run")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes through the same code (seconds on a CPU)")
    parser.add_argument("--out", type=Path, help=f"report file (default: {RESULTS.relative_to(ROOT)} for a GPU run)")
    parser.add_argument("--workdir", type=Path, help="where models built from configs are kept (default: a temp dir)")
    parser.add_argument("--run-part", choices=list(PARTS), help=argparse.SUPPRESS)  # the per-part worker process
    return parser


def _run_part(part: str, args: argparse.Namespace, timeout: float) -> PartResult:
    """Part ``part`` in a worker process; a failure or a timeout becomes a ``failed`` result with the reason."""
    command = [sys.executable, "-m", "benchmarks.gpu_check", "--run-part", part, "--device", args.device,
               "--workdir", str(args.workdir), *(["--smoke"] if args.smoke else [])]  # fmt: skip
    env = os.environ | {"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    title = PARTS[part].title
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return PartResult(part, title, "failed", notes=[f"timed out after {timeout:.0f} s"], seconds=timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = " / ".join(done.stderr.strip().splitlines()[-3:])
        return PartResult(part, title, "failed", notes=[f"exit code {done.returncode}: {tail}"],
                          seconds=time.perf_counter() - start)  # fmt: skip
    return PartResult(**json.loads(lines[-1]))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.run_part:  # worker: one part, its result as the last line of stdout
        result = PARTS[args.run_part].function(args.device, smoke=args.smoke, workdir=args.workdir)
        print(json.dumps(result.to_json()))
        return 0
    gpu = gpu_available(args.device)
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        args.workdir = args.workdir or Path(tmp)
        deadline = time.monotonic() + BUDGET_S
        results = []
        for part in args.parts:
            spec = PARTS[part]
            remaining = deadline - time.monotonic()
            if not gpu and not args.smoke:
                reason = f"skipped: no CUDA GPU here (device {args.device!r}); --smoke --device cpu runs tiny sizes"
                results.append(PartResult(part, spec.title, "skipped", notes=[reason]))
            elif remaining < 10:
                results.append(PartResult(part, spec.title, "skipped", notes=["skipped: the budget was spent"]))
            else:
                results.append(_run_part(part, args, min(spec.limit_s, remaining)))
            print(f"part {part}: {results[-1].status} ({results[-1].seconds:.0f} s)", file=sys.stderr)
    command = "scripts/gpu_check.sh " + shlex.join(argv if argv is not None else sys.argv[1:])
    report = render(environment(args.device), results, command=command.strip(), smoke=args.smoke)
    print(report)
    out = args.out or (RESULTS if gpu and not args.smoke else None)
    if out is not None:
        out.write_text(report)
        print(f"wrote {out}", file=sys.stderr)
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
