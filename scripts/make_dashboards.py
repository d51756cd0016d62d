"""Regenerate the demo dashboards of docs/images: a short run of the chain demo, of the flow demo and of the tool-use
demo, each drawn by the run dashboard (genalign.trainer.dashboard) and summarised as ``genalign report`` does.

    HF_HUB_OFFLINE=1 python scripts/make_dashboards.py                  # every demo, ~10 min on 2 CPU cores
    HF_HUB_OFFLINE=1 python scripts/make_dashboards.py --demos chain    # one of them
    HF_HUB_OFFLINE=1 python scripts/make_dashboards.py --smoke          # 1 step each, seconds; docs/images untouched

The runs are the presets (configs/demo_chain_grpo.yaml, configs/demo_shapes_flow_grpo.yaml,
configs/demo_tool_calculator_grpo.yaml) with the steps of ``DEMOS`` (the flow demo takes ~3 s per step on 2 CPU cores;
the tool-use demo runs its whole preset) and an evaluation every ``EVAL_EVERY`` steps on the presets' 256 held-out
prompts; they are written under ``--work`` (default runs/dashboards/), which is emptied first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

#: demo -> (preset, image under docs/images, training steps of the short run)
DEMOS = {
    "chain": ("configs/demo_chain_grpo.yaml", "demo_chain_grpo_dashboard.png", 100),
    "flow": ("configs/demo_shapes_flow_grpo.yaml", "demo_shapes_flow_grpo_dashboard.png", 30),
    "tool": ("configs/demo_tool_calculator_grpo.yaml", "demo_tool_calculator_grpo_dashboard.png", 40),
}
#: evaluation every this many steps (10 for a demo not listed)
EVAL_EVERY = {"tool": 5}


def train(preset: str, run_dir: Path, steps: int, eval_every: int, smoke: bool) -> float:
    """Train the short run in a subprocess (as ``genalign train`` would) and return its seconds."""
    overrides = [f"run.output_dir={run_dir}", f"run.max_steps={steps}", "run.max_time_minutes=null",
                 "run.save_every=0", "run.sample_every=0", "run.progress_bar=false",
                 f"eval.every={1 if smoke else eval_every}"]  # fmt: skip
    if smoke:  # the smallest run that still logs every panel's metric: 2 groups of 4, 4 held-out prompts, 1 thread
        overrides += ["eval.num_prompts=4", "algorithm.prompts_per_step=2", "algorithm.group_size=4",
                      "run.num_threads=1"]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    command = [sys.executable, "-m", "genalign.cli", "train", preset, *overrides]
    result = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", nargs="+", choices=sorted(DEMOS), default=sorted(DEMOS))
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "dashboards", help="folder of the runs")
    parser.add_argument("--smoke", action="store_true", help="1 step each; dashboards in --work, not docs/images")
    args = parser.parse_args(argv)
    from genalign.trainer.dashboard import draw_dashboard, summarize

    for name in args.demos:
        preset, image, steps = DEMOS[name]
        run_dir = args.work / Path(preset).stem
        shutil.rmtree(run_dir, ignore_errors=True)
        seconds = train(preset, run_dir, 1 if args.smoke else steps, EVAL_EVERY.get(name, 10), args.smoke)
        out = run_dir / image if args.smoke else ROOT / "docs" / "images" / image
        draw_dashboard(run_dir, out)
        print(f"== {name}: {preset}, {seconds:.0f} s\n{summarize(run_dir)}\ndashboard: {out}", flush=True)


if __name__ == "__main__":
    main()
