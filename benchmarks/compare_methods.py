"""Compare alignment methods on a demo preset under a fixed training-time budget.

Each (method, seed) trains ``genalign.trainer.train`` on the demo preset for ``--budget-s`` seconds of wall time
(``run.max_time_minutes``: training and evaluations), evaluating held-out accuracy every ``--eval-every`` steps; curves
and times to the target are against training time (rollout + update, evaluations not counted). Methods
differ only by config overrides. Writes one PNG (held-out accuracy and a training curve against training time, mean over
seeds with the min-max band) and a markdown table with the training time each run needed to reach the demo's target::

    python benchmarks/compare_methods.py --budget-s 60 --seeds 0 1 2 \
        --png benchmarks/compare_methods.png --table benchmarks/compare_methods_results.md
    python benchmarks/compare_methods.py --demo flow --budget-s 300 --seeds 0 1 --eval-every 5 \
        --png benchmarks/flow_methods_race.png --table /tmp/flow_race.md   # results: flow_trees_results.md
    python benchmarks/compare_methods.py --smoke    # seconds: 2 methods x 2 steps, files in a temporary folder

Demos: ``lm`` (arith-lm, configs/demo_arith_grpo.yaml; GRPO-family objectives; every method uses 2 minibatches per
rollout batch, so the second optimizer step of each batch sees real importance ratios; target 95 % accuracy) and
``flow`` (shapes-t2i-faded, configs/demo_shapes_flow_grpo.yaml; Flow-GRPO, MixGRPO window, tree rollouts,
Chunk-GRPO, DiffusionNFT and V-GRPO with the preset's learning rate and LoRA; target: +20 points over the start).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from genalign.config import from_dict, load_config  # noqa: E402
from genalign.config.core import apply_overrides  # noqa: E402
from genalign.config.schema import TrainConfig  # noqa: E402
from genalign.trainer import train  # noqa: E402

PRESET = ROOT / "configs" / "demo_arith_grpo.yaml"
USE_PRESET = PRESET.exists()  # decided once, so that every run of one comparison uses the same base config

#: used only while configs/demo_arith_grpo.yaml does not exist; deliberate copy of the dict in
#: tests/integration/test_method_catalogue.py (keep in sync)
FALLBACK_PRESET: dict[str, Any] = {
    "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "use_chat_template": False, "max_new_tokens": 5},
    "data": {
        "train": {"source": "procedural:arithmetic", "args": {"size": 2000, "split": "train", "digits": 3}},
        "eval": {"source": "procedural:arithmetic", "args": {"size": 200, "split": "eval", "digits": 3}},
    },
    "rewards": [{"fn": "exact_match", "name": "accuracy"}],
    "algorithm": {"group_size": 8, "prompts_per_step": 16, "micro_batch_size": 64},
    "optim": {"lr": 1.0e-4},
    "eval": {"num_prompts": 200, "batch_size": 200},
    "run": {"max_steps": 100, "progress_bar": False, "num_threads": 1, "sample_every": 0},
}

#: LM method -> ``algorithm.*`` overrides (the rest of the preset is shared; every method sets its own clip form with
#: its keywords, so that the preset's clip-higher bounds never leak into "grpo")
LM_ALGORITHMS: dict[str, list[str]] = {
    "grpo": [
        "advantage=grpo", "ratio_level=token", "clip={name: ppo, eps_low: 0.2, eps_high: 0.2}",
        "aggregation=seq_mean_token_mean",
    ],
    "dr_grpo": [
        "advantage=dr_grpo", "ratio_level=token", "clip={name: ppo, eps_low: 0.2, eps_high: 0.2}",
        "aggregation={name: seq_mean_token_sum_norm, max_len: 5}",
    ],
    "gspo": [
        "advantage=grpo", "ratio_level=sequence", "clip={name: ppo, eps_low: 0.0003, eps_high: 0.0004}",
        "aggregation=seq_mean_token_mean",
    ],
    "cispo": [
        "advantage=grpo", "ratio_level=token", "clip={name: cispo, eps_high: 0.28}", "aggregation=token_mean",
    ],
    "clip_higher": [
        "advantage=grpo", "ratio_level=token", "clip={name: ppo, eps_low: 0.2, eps_high: 0.28}",
        "aggregation=token_mean",
    ],
    "cumulative_ratio": [
        "advantage=grpo", "ratio_level=cumulative", "clip={name: ppo, eps_low: 0.2, eps_high: 0.2}",
        "aggregation=token_mean",
    ],
    "quantile_baseline": [
        "advantage=quantile", "ratio_level=token", "clip={name: ppo, eps_low: 0.2, eps_high: 0.2}",
        "aggregation=token_mean",
    ],
    "empirical_bayes": [
        "advantage=empirical_bayes", "ratio_level=token", "clip={name: ppo, eps_low: 0.2, eps_high: 0.2}",
        "aggregation=token_mean",
    ],
}  # fmt: skip

#: Chunk-GRPO [70]'s chunk-level ratio with 2 optimizer steps per batch (with 1, fully on-policy, chunk ratios give
#: Flow-GRPO's gradient)
CHUNK_RATIO = [
    "algorithm.ratio_level={name: chunk, chunk_boundaries: [0, 2, 5]}",
    "algorithm.minibatches=2",
    "algorithm.clip={name: ppo, eps_low: 1.0e-3, eps_high: 1.0e-3}",
]
#: 8 steps with 2nd-order ODE steps after the SDE window (MixGRPO-Flash)
AB2_8 = ["policy.ode_solver=ab2", "policy.num_steps=8"]
LR_2X = ["optim.lr=6.0e-4"]  # twice the preset's learning rate

#: flow method -> config overrides of the shapes demo preset (group 8 = the 2^3 leaves of a 3-split tree)
FLOW_METHODS: dict[str, list[str]] = {
    "flow_grpo": [],
    "mixgrpo_window": [
        "policy.train_steps={strategy: sliding_window, stochastic: trained, window_size: 3, advance_every: 25}"
    ],
    "tree_branchgrpo": ["policy.tree={enabled: true, split_steps: [0, 3, 6]}"],
    "chunk_grpo": CHUNK_RATIO,
    "diffusion_nft": ["policy.likelihood_free.method=nft"],
    "v_grpo_elbo": ["policy.likelihood_free.method=elbo"],
    # catalogue II and engineering
    "vgpo_anchor": ["algorithm.advantage=value_anchored"],  # [67] absolute-value-anchored group normalisation
    "sage_sde": ["policy.dynamics=manifold_sde", "algorithm.credit=[gradient_norm_equalizer]"],  # [76] (a) + (b)
    "chunk_ab2_8": [*CHUNK_RATIO, *AB2_8],
    "chunk_ab2_8_lr6": [*CHUNK_RATIO, *AB2_8, *LR_2X],
    "flow_grpo_lr6": LR_2X,  # the control of chunk_ab2_8_lr6: Flow-GRPO at the same learning rate
}


@dataclass(frozen=True)
class Demo:
    """A preset, its methods (name -> overrides), overrides every method gets, and the accuracy target."""

    preset: Path
    title: str
    methods: dict[str, list[str]]
    shared: list[str] = field(default_factory=list)
    target: float = 0.95  # absolute accuracy, or the gain over the start accuracy when ``relative``
    relative: bool = False
    curve: tuple[str, str] = ("entropy", "policy entropy per token (nats")  # metrics key, axis label of panel 2

    def target_for(self, start: float) -> float:
        return start + self.target if self.relative else self.target

    def target_text(self) -> str:
        return f"+{self.target * 100:.0f} points over the start" if self.relative else f"{self.target:.0%}"


DEMOS = {
    "lm": Demo(
        PRESET, "arith-lm demo", {name: [f"algorithm.{item}" for item in items] for name, items in LM_ALGORITHMS.items()},
        shared=["algorithm.minibatches=2"],
    ),
    "flow": Demo(
        ROOT / "configs" / "demo_shapes_flow_grpo.yaml", "shapes-t2i-faded demo", FLOW_METHODS, target=0.20,
        shared=["policy.eval_ode_solver=euler"], relative=True, curve=("reward/mean", "training reward (partial credit"),
    ),
}  # fmt: skip
DEMO = DEMOS["lm"]  # set by main()


#: ``--smoke``: the first methods of the demo, 2 training steps each, small batches, evaluations and training sets
SMOKE_METHODS = 2
SMOKE_OVERRIDES = {
    "lm": ["run.max_steps=2", "algorithm.prompts_per_step=4", "eval.num_prompts=16", "data.train.args.size=256"],
    "flow": ["run.max_steps=2", "algorithm.prompts_per_step=2", "eval.num_prompts=4", "eval.batch_size=4",
             "data.train.args.size=256"],
}  # fmt: skip
EXTRA_OVERRIDES: list[str] = []  # set by main() (``--smoke``)


def method_config(method: str, seed: int, budget_s: float, eval_every: int, output_dir: Path) -> TrainConfig:
    overrides = (
        DEMO.methods[method]
        + DEMO.shared
        + [
            f"run.seed={seed}",
            f"run.output_dir={output_dir}",
            f"run.max_time_minutes={budget_s / 60.0}",
            "run.max_steps=100000",
            "run.progress_bar=false",
            "run.num_threads=1",
            "run.sample_every=0",
            "run.save_every=0",
            f"eval.every={eval_every}",
            "eval.at_start=true",
        ]
        + EXTRA_OVERRIDES
    )
    if DEMO.preset != PRESET or USE_PRESET:
        return load_config(DEMO.preset, overrides)
    return from_dict(TrainConfig, apply_overrides(json.loads(json.dumps(FALLBACK_PRESET)), overrides))


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def collect(method: str, seed: int, work: Path, wall_s: float = float("nan")) -> dict[str, Any]:
    """Curves of a finished run: against cumulative training time (sum of ``time/step_s``) and against steps."""
    output_dir = work / f"{method}-seed{seed}"
    steps = _read(output_dir / "metrics.jsonl")
    clock, elapsed = {0: 0.0}, 0.0
    for record in steps:
        elapsed += record["time/step_s"]
        clock[record["step"]] = elapsed
    evals = [e for e in _read(output_dir / "eval.jsonl") if e["step"] in clock]
    return {
        "method": method,
        "seed": seed,
        "steps": len(steps),
        "wall_s": wall_s,
        "accuracy": [(clock[e["step"]], e["eval/accuracy"]) for e in evals],
        "accuracy_by_step": [(e["step"], e["eval/accuracy"]) for e in evals],
        "curve": [(clock[r["step"]], r[DEMO.curve[0]]) for r in steps if r.get(DEMO.curve[0]) is not None],
        "clip_frac": statistics.fmean(r.get("clip_frac", 0.0) for r in steps) if steps else float("nan"),
    }


def run_one(method: str, seed: int, budget_s: float, eval_every: int, work: Path) -> dict[str, Any]:
    """Train one (method, seed) and return :func:`collect`'s curves."""
    torch.manual_seed(seed)
    started = time.perf_counter()
    train(method_config(method, seed, budget_s, eval_every, work / f"{method}-seed{seed}"))
    return collect(method, seed, work, time.perf_counter() - started)


def _grid_values(curves: list[list[tuple[float, float]]], grid: list[float]) -> list[list[float]]:
    """Step-wise (last value so far) curves on a common grid, one row per curve (NaN before a curve's first point)."""
    values = []
    for curve in curves:
        row, index = [], 0
        for x in grid:
            while index + 1 < len(curve) and curve[index + 1][0] <= x:
                index += 1
            row.append(curve[index][1] if curve and curve[0][0] <= x else float("nan"))
        values.append(row)
    return values


def _grid_mean(
    curves: list[list[tuple[float, float]]], grid: list[float]
) -> tuple[list[float], list[float], list[float]]:
    """Step-wise (last value so far) curves on a common time grid: mean, min and max over seeds."""
    columns = list(zip(*_grid_values(curves, grid)))
    finite = [[v for v in column if v == v] for column in columns]
    return (
        [statistics.fmean(c) if c else float("nan") for c in finite],
        [min(c) if c else float("nan") for c in finite],
        [max(c) if c else float("nan") for c in finite],
    )


def _trailing_mean(curve: list[tuple[float, float]], window: int) -> list[tuple[float, float]]:
    """Smooth a noisy per-step curve with the mean of the last ``window`` points."""
    values = [v for _, v in curve]
    return [(x, statistics.fmean(values[max(0, i - window + 1) : i + 1])) for i, (x, _) in enumerate(curve)]


def plot(results: list[dict[str, Any]], budget_s: float, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = [budget_s * i / 100 for i in range(101)]
    common_steps = min(r["accuracy_by_step"][-1][0] for r in results)
    step_grid = list(range(common_steps + 1))
    fig, (ax_acc, ax_curve, ax_step) = plt.subplots(1, 3, figsize=(18, 5))
    for method in DEMO.methods:
        runs = [r for r in results if r["method"] == method]
        if not runs:
            continue
        for ax, key in ((ax_acc, "accuracy"), (ax_curve, "curve")):
            curves = [r[key] if key == "accuracy" else _trailing_mean(r[key], 5) for r in runs]
            mean, low, high = _grid_mean(curves, grid)
            (line,) = ax.plot(grid, mean, label=method)
            ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.12)
        mean, _, _ = _grid_mean([r["accuracy_by_step"] for r in runs], step_grid)
        ax_step.plot(step_grid, mean, label=method)
    ax_acc.set(
        xlabel="training time (s, rollout + update)", ylabel="held-out accuracy (eval settings of the base config)"
    )
    ax_curve.set(xlabel="training time (s, rollout + update)", ylabel=f"{DEMO.curve[1]}, mean of 5 steps)")
    ax_step.set(xlabel="training step (same steps for every method)", ylabel="held-out accuracy, mean over seeds")
    ax_acc.legend(fontsize=8)
    seeds = sorted({r["seed"] for r in results})
    fig.suptitle(f"{DEMO.title}, {budget_s:.0f} s wall-time budget per run, seeds {seeds} (mean, min-max band)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def _at_step(run: dict[str, Any], step: int) -> float:
    """Accuracy of the last evaluation at or before ``step``."""
    return [acc for s, acc in run["accuracy_by_step"] if s <= step][-1]


def _time_to(run: dict[str, Any], target: float) -> float:
    """Training seconds until the held-out accuracy first reaches ``target`` (inf if never)."""
    return next((t for t, acc in run["accuracy"] if acc >= target), float("inf"))


def table(results: list[dict[str, Any]], budget_s: float, early_step: int = 5) -> str:
    every_eval = [{s for s, _ in r["accuracy_by_step"]} for r in results]
    common_step = max(set.intersection(*every_eval))
    lines = [
        f"Budget {budget_s:.0f} s of wall time per run (training + evaluations); times are training seconds; seeds {sorted({r['seed'] for r in results})}; "
        "held-out accuracy = the base config's eval accuracy reward on its eval split.",
        "",
        "| method | steps (mean) | accuracy at start | final accuracy (mean ± sd) | best final | "
        f"accuracy at step {early_step} | accuracy at step {common_step} (mean ± sd) | "
        f"training s to {DEMO.target_text()} (per seed) | final {DEMO.curve[0]} | clip fraction |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method in DEMO.methods:
        runs = [r for r in results if r["method"] == method]
        if not runs:
            continue
        start = [r["accuracy"][0][1] for r in runs if r["accuracy"]]
        final = [r["accuracy"][-1][1] for r in runs if r["accuracy"]]
        curve_end = [r["curve"][-1][1] for r in runs if r["curve"]]
        at_step = [_at_step(r, common_step) for r in runs]
        sd = statistics.stdev(final) if len(final) > 1 else 0.0
        sd_step = statistics.stdev(at_step) if len(at_step) > 1 else 0.0
        times_to_target = [_time_to(r, DEMO.target_for(r["accuracy"][0][1])) for r in runs if r["accuracy"]]
        lines.append(
            f"| {method} | {statistics.fmean(r['steps'] for r in runs):.0f} | {statistics.fmean(start):.3f} | "
            f"{statistics.fmean(final):.3f} ± {sd:.3f} | {max(final):.3f} | "
            f"{statistics.fmean(_at_step(r, early_step) for r in runs):.3f} | "
            f"{statistics.fmean(at_step):.3f} ± {sd_step:.3f} | "
            f"{', '.join(f'{seconds:.0f}' for seconds in times_to_target)} | "
            f"{statistics.fmean(curve_end) if curve_end else float('nan'):.3f} | "
            f"{statistics.fmean(r['clip_frac'] for r in runs):.4f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", choices=list(DEMOS), default="lm")
    parser.add_argument("--methods", nargs="+", default=None, help="default: all methods of the demo")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget-s", type=float, default=60.0, help="training time per run (seconds)")
    parser.add_argument("--eval-every", type=int, default=10, help="evaluate every N steps")
    parser.add_argument("--work", type=Path, default=None, help="run folders (default runs/compare_methods)")
    parser.add_argument("--png", type=Path, default=None, help="default benchmarks/compare_methods.png")
    parser.add_argument("--table", type=Path, default=None, help="default benchmarks/compare_methods_results.md")
    parser.add_argument(
        "--smoke", action="store_true", help=f"seconds: the first {SMOKE_METHODS} methods, seed 0, 2 steps each, "
        "evaluations every step; run folders, PNG and table in a temporary folder unless given"
    )  # fmt: skip
    parser.add_argument("--render-only", action="store_true", help="re-read the runs under --work; train nothing")
    parser.add_argument(
        "--fallback-preset",
        action="store_true",
        help="use FALLBACK_PRESET even when configs/demo_arith_grpo.yaml exists",
    )
    args = parser.parse_args(argv)
    global DEMO, EXTRA_OVERRIDES
    DEMO = DEMOS[args.demo]
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            args.methods = args.methods or list(DEMO.methods)[:SMOKE_METHODS]
            args.seeds, args.eval_every, EXTRA_OVERRIDES = [0], 1, SMOKE_OVERRIDES[args.demo]
            args.work = args.work or Path(tmp) / "runs"
            args.png = args.png or Path(tmp) / "compare_methods.png"
            args.table = args.table or Path(tmp) / "compare_methods_results.md"
            return compare(args, parser)
    args.work = args.work or ROOT / "runs" / "compare_methods"
    args.png = args.png or ROOT / "benchmarks" / "compare_methods.png"
    args.table = args.table or ROOT / "benchmarks" / "compare_methods_results.md"
    return compare(args, parser)


def compare(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Train (or re-read) every (method, seed), then write the PNG and the table."""
    global USE_PRESET
    unknown = sorted(set(args.methods or ()) - set(DEMO.methods))
    if unknown:
        parser.error(f"--methods {unknown} are not methods of --demo {args.demo}; choose from {list(DEMO.methods)}")
    args.methods = args.methods or list(DEMO.methods)
    USE_PRESET = USE_PRESET and not args.fallback_preset
    torch.set_num_threads(1)
    results = []
    for seed in args.seeds:
        for method in args.methods:
            if args.render_only:
                result = collect(method, seed, args.work)
            else:
                result = run_one(method, seed, args.budget_s, args.eval_every, args.work)
            results.append(result)
            print(
                f"{method} seed {seed}: {result['steps']} steps, accuracy {result['accuracy'][-1][1]:.3f}", flush=True
            )
    (args.work / "results.json").write_text(json.dumps(results))
    plot(results, args.budget_s, args.png)
    text = table(results, args.budget_s)
    use_preset = DEMO.preset != PRESET or USE_PRESET
    base = (
        f"preset {DEMO.preset.relative_to(ROOT)}"
        if use_preset
        else "the fallback preset in benchmarks/compare_methods.py"
    )
    args.table.write_text(f"# Method comparison on the {DEMO.title}\n\nBase config: {base}.\n\n" + text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
