"""Race of alignment methods on the multi-step reasoning demo (builtin:chain-lm, configs/demo_chain_grpo.yaml).

Every (method, seed) trains ``genalign.trainer.train`` on the preset for the same wall-time budget
(``run.max_time_minutes``: training and evaluations), ``--parallel`` runs at a time, each in its own process with one
CPU thread; methods differ only by ``algorithm.*`` overrides (:data:`METHODS`; the preset itself is plain GRPO). The
runs, curves and helpers are those of ``compare_methods.py`` (its ``method_config``, ``run_one``, ``collect`` and grid
functions); this script adds the parallel schedule, standard errors, response lengths and the published effects.

Outputs: one PNG (held-out accuracy against training time with mean ± standard error over seeds, per-token entropy,
mean response length and mean length of incorrect responses) and one markdown file (the table, a comparison with GRPO
at two standard errors, and three published effects measured on this task). Text below the line ``<!-- notes -->`` of an
existing results file is kept when the file is rewritten::

    python benchmarks/race_chain.py --budget-s 75 --eval-every 5 --methods grpo dr_grpo clip_higher dapo gspo \
        cispo rloo sspo fipo gvpo disco lopti high_entropy_tokens entropy_gated conflict_tokens intra_group_variance \
        key_tokens step_potential uncertainty_shaping entropy_critical_tokens token_subsample entropy_pivots
                                                        # the committed race: 22 methods x 3 seeds, ~50 min
    python benchmarks/race_chain.py --render-only                                 # re-read runs/race_chain
    python benchmarks/race_chain.py --smoke    # seconds: 2 methods x 1 step in one process, temporary files

Held-out accuracy: greedy (the preset's ``eval_temperature``), exact final answer, 256 eval-split prompts. Response
lengths are read from per-step sample dumps (every sample of every step; characters = tokens without ``<eos>``), and
correctness there is recomputed with the task's checker.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCHMARKS))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import compare_methods as cm  # noqa: E402

from genalign.data.chains import grade_chain  # noqa: E402

PRESET = ROOT / "configs" / "demo_chain_grpo.yaml"
MAX_NEW_TOKENS = 96  # the preset's policy.max_new_tokens (Dr. GRPO's constant normaliser)

#: method -> ``algorithm.*`` overrides of the preset (plain GRPO: group-std advantages, token ratios, PPO clip 0.2/0.2,
#: per-sequence token mean); ``[n]`` is the method's abstract number in shared/seeds/abstracts.md
METHODS: dict[str, list[str]] = {
    "grpo": [],
    # sample-level estimators, ratios, clipping and aggregation
    "dr_grpo": ["advantage=dr_grpo", f"aggregation={{name: seq_mean_token_sum_norm, max_len: {MAX_NEW_TOKENS}}}"],  # [31]
    "clip_higher": ["clip={name: ppo, eps_low: 0.2, eps_high: 0.28}"],  # DAPO's decoupled clip only
    "dapo": ["clip={name: ppo, eps_low: 0.2, eps_high: 0.28}", "aggregation=token_mean", "dynamic_sampling={enabled: true}"],
    "gspo": ["ratio_level=sequence", "clip={name: ppo, eps_low: 0.0003, eps_high: 0.0004}"],  # [293]
    "cispo": ["clip={name: cispo, eps_high: 0.28}", "aggregation=token_mean"],
    "rloo": ["advantage=rloo"],  # [3]
    "sspo": ["ratio_level=sentence"],  # [15], sentences = step lines
    "fipo": ["ratio_level=future_influence"],  # [316]
    "gvpo": ["objective={name: gvpo, beta: 0.1}", "clip=ppo", "advantage=dr_grpo"],  # [139] (clip=ppo: not a ratio objective)
    "disco": ["objective=disco", "clip=ppo"],  # [289]
    "lopti": ["objective=lopti"],  # [219]
    # token, segment and sequence credit
    "high_entropy_tokens": ["credit=[high_entropy_tokens]"],  # [200] top-20 % entropy tokens
    "entropy_gated": ["credit=[entropy_gated]"],  # [84]
    "conflict_tokens": ["credit=[conflict_tokens]"],  # [138] GTPO
    "intra_group_variance": ["credit=[intra_group_variance]"],  # [156] TW-GRPO
    "key_tokens": ["credit=[key_tokens]"],  # [158] KTAE
    "spurious_tokens": ["credit=[spurious_tokens]"],  # [185] STAPO
    "step_potential": ["credit=[step_potential]"],  # [193] SPAE (answer probe after each step line)
    "low_entropy_segments": ["credit=[low_entropy_segments]"],  # [195] LESS
    "uncertainty_shaping": ["credit=[uncertainty_shaping]"],  # [210] UCAS
    "entropy_critical_tokens": ["credit=[entropy_critical_tokens]"],  # [217] STARE
    "probability_damping": ["credit=[probability_damping]"],  # [219] Lopti's advantage reweighting
    "token_subsample": ["credit=[token_subsample]"],  # [220] NAT
    "entropy_pivots": ["credit=[entropy_pivots]"],  # [251] ERPO
    "tree_td": ["credit=[tree_td]"],  # [255] TEMPO
    "entropy_change": ["credit=[entropy_change]"],  # [328] STEER
    "aem": ["credit=[aem]"],  # [231]
    # where the samples come from (sample sources; the sampling race, race_chain_sampling_results.md)
    "dynamic_sampling": ["dynamic_sampling={enabled: true}"],  # DAPO's dynamic sampling alone
    "depo": ["sample_sources=[depo]"],  # [151]
    "spo": ["sample_sources=[spo]"],  # [324] single-stream SPO: per-prompt value tracker, prioritised prompts
    "adagrpo": ["sample_sources=[adagrpo_curriculum]"],  # [62]
    "vas": ["sample_sources=[vas]"],  # [110]
    "erpo": ["sample_sources=[erpo]"],  # [203] residual-prompt temperature
    "dars": ["sample_sources=[dars]"],  # [192]
    "aero": ["sample_sources=[aero]"],  # [234]
    "xrpo": ["sample_sources=[xrpo]"],  # [241] allocator
    "d3s": ["sample_sources=[d3s_samples]"],  # [27] sample level
    "gcpo": ["sample_sources=[gcpo]"],  # [253] reference solution in all-wrong groups
    "adaprefix": ["sample_sources=[adaprefix]"],  # [77] reference prefix toward 50 % success
    "edge_gec": ["sample_sources=[{name: edge_gec, tokenizer: 'builtin:chain-lm'}]"],  # [99]
    "ar3po": ["sample_sources=[ar3po]", "clip.name=off_policy"],  # [106] staged rollouts + reuse (the preset's bounds)
}  # fmt: skip

#: ``--smoke``: these methods, 1 training step each, small batches, evaluations and training set
SMOKE_METHODS = ["grpo", "dr_grpo"]
SMOKE_OVERRIDES = ["run.max_steps=1", "algorithm.prompts_per_step=2", "eval.num_prompts=8", "eval.batch_size=8",
                   "data.train.args.size=256"]  # fmt: skip
#: every race run dumps every sample of every step (lengths of correct and incorrect responses)
DUMP_OVERRIDES = ["run.sample_every=1", "run.samples_per_dump=100000"]

DEMO = cm.Demo(
    PRESET, "chain-lm demo", {name: [f"algorithm.{item}" for item in items] for name, items in METHODS.items()}
)


def use_demo(extra: list[str]) -> None:
    """Point compare_methods at this demo (its ``method_config`` / ``collect`` read these module globals)."""
    cm.DEMO, cm.EXTRA_OVERRIDES = DEMO, [*DUMP_OVERRIDES, *extra]


# ----------------------------------------------------------------------------------------------------------------------
# running
# ----------------------------------------------------------------------------------------------------------------------


def run_dir(work: Path, method: str, seed: int) -> Path:
    return work / f"{method}-seed{seed}"


def finished(work: Path, method: str, seed: int) -> bool:
    return (run_dir(work, method, seed) / "eval.json").exists()


def launch(runs: tuple[tuple[str, int], ...], args: argparse.Namespace) -> subprocess.Popen:
    """Start one process that trains ``runs`` (method, seed) one after another (a folder left by an unfinished run is
    removed first); its log is named after its first run."""
    for method, seed in runs:
        folder = run_dir(args.work, method, seed)
        if folder.exists():
            shutil.rmtree(folder)
    args.work.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, __file__, "--one", *(str(item) for run in runs for item in run)]
    command += ["--budget-s", str(args.budget_s), "--eval-every", str(args.eval_every), "--work", str(args.work)]
    command += (["--smoke"] if args.smoke else []) + (["--set", *args.set] if args.set else [])
    method, seed = runs[0]
    log = (args.work / f"{method}-seed{seed}.log").open("w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def race(args: argparse.Namespace) -> None:
    """Train every (method, seed) not finished yet, seeds in the outer loop: each run in its own process,
    ``args.parallel`` at a time; the smoke trains all its runs in one process (its runs are seconds long, the start of
    a process with the trainer's imports is most of a smoke run's CPU)."""
    queue = [(m, s) for s in args.seeds for m in args.methods if not finished(args.work, m, s)]
    per_process = max(1, len(queue)) if args.smoke else 1
    batches = [tuple(queue[i : i + per_process]) for i in range(0, len(queue), per_process)]
    running: dict[tuple[tuple[str, int], ...], subprocess.Popen] = {}
    while batches or running:
        while batches and len(running) < args.parallel:
            runs = batches.pop(0)
            running[runs] = launch(runs, args)
        time.sleep(1.0)
        for runs, proc in list(running.items()):
            if proc.poll() is not None:
                del running[runs]
                for method, seed in runs:
                    done = proc.returncode == 0 and finished(args.work, method, seed)
                    print(f"{method} seed {seed}: {'done' if done else f'FAILED ({proc.returncode})'}", flush=True)


def validate_methods(methods: list[str], extra: list[str]) -> None:
    """Build every method's config before anything runs (a bad override fails here, naming the method)."""
    use_demo(extra)
    for method in methods:
        try:
            cm.method_config(method, 0, 60.0, 10, Path(tempfile.gettempdir()) / "race_chain_validate")
        except Exception as error:
            raise SystemExit(f"method {method!r} does not validate on {PRESET.name}: {error}") from error


# ----------------------------------------------------------------------------------------------------------------------
# reading runs
# ----------------------------------------------------------------------------------------------------------------------


def lengths_by_step(folder: Path) -> list[dict[str, float]]:
    """Per step: mean response length of all, correct and incorrect samples (characters), from the sample dumps."""
    rows = []
    for path in sorted((folder / "samples").glob("step-*.jsonl"), key=lambda p: int(p.stem.split("-")[1])):
        records = [json.loads(line) for line in path.read_text().splitlines() if line]
        right = [grade_chain(r["prompt"], r["output"]).correct for r in records]
        sizes = [len(r["output"]) for r in records]
        wrong_sizes = [n for n, ok in zip(sizes, right, strict=True) if not ok]
        right_sizes = [n for n, ok in zip(sizes, right, strict=True) if ok]
        rows.append(
            {
                "step": int(path.stem.split("-")[1]),
                "all": statistics.fmean(sizes),
                "incorrect": statistics.fmean(wrong_sizes) if wrong_sizes else float("nan"),
                "correct": statistics.fmean(right_sizes) if right_sizes else float("nan"),
                "share_correct": statistics.fmean(right),
            }
        )
    return rows


def read_run(work: Path, method: str, seed: int) -> dict[str, Any]:
    """compare_methods' curves of a run, plus response lengths and per-step entropy."""
    result = cm.collect(method, seed, work)
    folder = run_dir(work, method, seed)
    steps = cm._read(folder / "metrics.jsonl")
    result["entropy_by_step"] = [(r["step"], r["entropy"]) for r in steps if r.get("entropy") is not None]
    result["lengths"] = lengths_by_step(folder)
    result["seconds_per_step"] = statistics.fmean(r["time/step_s"] for r in steps) if steps else float("nan")
    return result


# ----------------------------------------------------------------------------------------------------------------------
# statistics
# ----------------------------------------------------------------------------------------------------------------------


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (sd / sqrt(n); 0 for one value) of the finite values."""
    values = [v for v in values if v == v]
    if not values:
        return float("nan"), float("nan")
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return statistics.fmean(values), se


def window_mean(points: list[tuple[float, float]], low: float, high: float) -> float:
    """Mean of the values whose x lies in ``[low, high]`` (NaN if none)."""
    inside = [v for x, v in points if low <= x <= high and v == v]
    return statistics.fmean(inside) if inside else float("nan")


def final_accuracy(run: dict[str, Any]) -> float:
    return run["accuracy"][-1][1]


def accuracy_auc(run: dict[str, Any], horizon_s: float, points: int = 60) -> float:
    """Mean held-out accuracy over the first ``horizon_s`` seconds of training (the area under the step-wise
    accuracy-against-training-time curve divided by the horizon): rewards learning fast, not only ending high."""
    grid = [horizon_s * i / points for i in range(points + 1)]
    values = [v for v in cm._grid_values([run["accuracy"]], grid)[0] if v == v]
    return statistics.fmean(values) if values else float("nan")


def common_horizon(results: list[dict[str, Any]]) -> float:
    """The training time every run reached (its last evaluation), the horizon of :func:`accuracy_auc`."""
    return min(r["accuracy"][-1][0] for r in results)


def tail_fraction(run: dict[str, Any], key: str, fraction: float = 1 / 3) -> float:
    """Mean of a per-step curve over the last ``fraction`` of the run's steps."""
    points = run[key]
    last = run["steps"]
    return window_mean(points, last * (1 - fraction), last) if points else float("nan")


def incorrect_length_growth(run: dict[str, Any], window: int = 5) -> float:
    """Mean length of incorrect responses over the last ``window`` steps minus over the first ``window`` steps."""
    values = [(r["step"], r["incorrect"]) for r in run["lengths"]]
    if not values:
        return float("nan")
    last = values[-1][0]
    return window_mean(values, last - window + 1, last) - window_mean(values, 1, window)


# ----------------------------------------------------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------------------------------------------------


def by_method(results: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        grouped.setdefault(result["method"], []).append(result)
    return grouped


def plot(results: list[dict[str, Any]], budget_s: float, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grouped = by_method(results)
    time_grid = [budget_s * i / 100 for i in range(101)]
    max_step = max(r["steps"] for r in results)
    step_grid = list(range(1, max_step + 1))
    fig, axes = plt.subplots(2, 2, figsize=(16, 11))
    cmap = plt.get_cmap("tab20")
    for index, (method, runs) in enumerate(grouped.items()):
        style = {"color": cmap(index % 20), "linestyle": "-" if index < 20 else "--", "label": method}
        panels = [
            (axes[0, 0], [r["accuracy"] for r in runs], time_grid),
            (axes[0, 1], [cm._trailing_mean(r["entropy_by_step"], 5) for r in runs], step_grid),
            (axes[1, 0], [[(x["step"], x["all"]) for x in r["lengths"]] for r in runs], step_grid),
            (axes[1, 1], [cm._trailing_mean([(x["step"], x["incorrect"]) for x in r["lengths"]], 5) for r in runs],
             step_grid),
        ]  # fmt: skip
        for ax, curves, grid in panels:
            rows = cm._grid_values([c for c in curves if c], grid)
            stats = [mean_se(list(column)) for column in zip(*rows)] if rows else []
            mean = [m for m, _ in stats]
            ax.plot(grid, mean, **style)
            if ax is axes[0, 0]:
                low = [m - s for m, s in stats]
                high = [m + s for m, s in stats]
                ax.fill_between(grid, low, high, color=style["color"], alpha=0.10)
    axes[0, 0].set(xlabel="training time (s, rollout + update)", ylabel="held-out accuracy (greedy), mean ± SE")
    axes[0, 1].set(xlabel="training step", ylabel="policy entropy per token (nats, mean of 5 steps)")
    axes[1, 0].set(xlabel="training step", ylabel="mean response length (tokens w/o <eos>)")
    axes[1, 1].set(xlabel="training step", ylabel="mean length of incorrect responses (mean of 5 steps)")
    axes[0, 0].legend(fontsize=7, ncol=2)
    seeds = sorted({r["seed"] for r in results})
    fig.suptitle(f"{DEMO.title}: {budget_s:.0f} s wall time per run, seeds {seeds} (mean over seeds; band: ± 1 SE)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)
    plt.close(fig)


def _pm(value: tuple[float, float], digits: int = 3) -> str:
    return f"{value[0]:.{digits}f} ± {value[1]:.{digits}f}"


def table(results: list[dict[str, Any]], budget_s: float) -> str:
    grouped = by_method(results)
    common = min(r["accuracy_by_step"][-1][0] for r in results)
    common = max(s for s, _ in grouped["grpo"][0]["accuracy_by_step"] if s <= common) if "grpo" in grouped else common
    horizon = common_horizon(results)
    base_auc = mean_se([accuracy_auc(r, horizon) for r in grouped.get("grpo", [])])
    base_final = mean_se([final_accuracy(r) for r in grouped.get("grpo", [])])
    base_step = mean_se([cm._at_step(r, common) for r in grouped.get("grpo", [])])
    lines = [
        f"| method | runs | steps (mean) | s/step | accuracy at start | mean accuracy over the first {horizon:.0f} s "
        "of training (AUC) | Δ AUC vs GRPO | final accuracy (mean ± SE) | Δ final vs GRPO | "
        f"accuracy at step {common} (mean ± SE) | Δ at step {common} vs GRPO | entropy, last third | "
        "response length, last 5 steps | incorrect-length growth | clip fraction |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method, runs in grouped.items():
        final = mean_se([final_accuracy(r) for r in runs])
        auc = mean_se([accuracy_auc(r, horizon) for r in runs])
        at_step = mean_se([cm._at_step(r, common) for r in runs])
        cells = [
            method, str(len(runs)), f"{statistics.fmean(r['steps'] for r in runs):.0f}",
            f"{statistics.fmean(r['seconds_per_step'] for r in runs):.2f}",
            _pm(mean_se([r["accuracy"][0][1] for r in runs])), _pm(auc), verdict(auc, base_auc, method),
            _pm(final), verdict(final, base_final, method),
            _pm(at_step), verdict(at_step, base_step, method),
            _pm(mean_se([tail_fraction(r, "entropy_by_step") for r in runs])),
            _pm(mean_se([window_mean([(x["step"], x["all"]) for x in r["lengths"]], r["steps"] - 4, r["steps"])
                         for r in runs]), 1),
            _pm(mean_se([incorrect_length_growth(r) for r in runs]), 1),
            f"{statistics.fmean(r['clip_frac'] for r in runs):.4f}",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def verdict(value: tuple[float, float], base: tuple[float, float], method: str) -> str:
    """``+0.051 (better)`` when the difference to GRPO exceeds two standard errors of the difference."""
    if method == "grpo" or base[0] != base[0]:
        return "—"
    diff, se = value[0] - base[0], math.sqrt(value[1] ** 2 + base[1] ** 2)
    word = "better" if diff > 2 * se else "worse" if diff < -2 * se else "within 2 SE"
    return f"{diff:+.3f} ({word})"


def effects(results: list[dict[str, Any]]) -> str:
    """The three published effects, measured on this task (only for the methods that ran)."""
    grouped = by_method(results)
    lines = ["## Published effects on this task", ""]

    def stat(method: str, fn) -> tuple[float, float]:
        return mean_se([fn(r) for r in grouped.get(method, [])])

    if {"grpo", "clip_higher"} <= set(grouped):
        ent = {m: stat(m, lambda r: tail_fraction(r, "entropy_by_step")) for m in ("grpo", "clip_higher", "dapo")}
        early = {m: stat(m, lambda r: window_mean(r["entropy_by_step"], 1, 5)) for m in ("grpo", "clip_higher")}
        lines += [
            "**(a) Clip-higher keeps entropy above symmetric clipping (DAPO).** Per-token entropy, mean over the last "
            "third of each run's steps (first 5 steps in brackets):",
            f"symmetric 0.2/0.2 (grpo) {_pm(ent['grpo'])} [{_pm(early['grpo'])}]; clip-higher 0.2/0.28 {_pm(ent['clip_higher'])} "
            f"[{_pm(early['clip_higher'])}]" + (f"; full DAPO recipe {_pm(ent['dapo'])}" if "dapo" in grouped else "")
            + f". Difference clip-higher − grpo: {verdict(ent['clip_higher'], ent['grpo'], 'clip_higher')}.",
            "",
        ]  # fmt: skip
    if {"grpo", "high_entropy_tokens"} <= set(grouped):
        acc = {m: stat(m, final_accuracy) for m in ("grpo", "high_entropy_tokens")}
        lines += [
            "**(b) Training only the top-20 % entropy tokens matches or beats all tokens [200].** Final held-out "
            f"accuracy: all tokens {_pm(acc['grpo'])}, top-20 % {_pm(acc['high_entropy_tokens'])}; difference "
            f"{verdict(acc['high_entropy_tokens'], acc['grpo'], 'high_entropy_tokens')}.",
            "",
        ]
    if {"grpo", "dr_grpo"} <= set(grouped):
        growth = {m: stat(m, incorrect_length_growth) for m in ("grpo", "dr_grpo")}
        first = {m: stat(m, lambda r: window_mean([(x["step"], x["incorrect"]) for x in r["lengths"]], 1, 5))
                 for m in ("grpo", "dr_grpo")}  # fmt: skip
        lines += [
            "**(c) Dr. GRPO's normaliser curbs the length growth of incorrect responses [31].** Mean length of "
            "incorrect training responses, last 5 steps minus first 5 steps (first-5 level in brackets): "
            f"GRPO {_pm(growth['grpo'], 1)} [{_pm(first['grpo'], 1)}], Dr. GRPO {_pm(growth['dr_grpo'], 1)} "
            f"[{_pm(first['dr_grpo'], 1)}]; difference Dr. GRPO − GRPO "
            f"{verdict(growth['dr_grpo'], growth['grpo'], 'dr_grpo')} (tokens).",
            "",
        ]
    return "\n".join(lines)


NOTES_MARKER = "<!-- notes -->"


def write_report(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """The results markdown (keeps the text below :data:`NOTES_MARKER` of an existing file)."""
    seeds = sorted({r["seed"] for r in results})
    notes = ""
    if args.table.exists() and NOTES_MARKER in args.table.read_text():
        notes = args.table.read_text().split(NOTES_MARKER, 1)[1]
    text = (
        f"# Method race on the {DEMO.title}\n\nBase config: preset {PRESET.relative_to(ROOT)} (plain GRPO); every "
        f"method changes only `algorithm.*` (benchmarks/race_chain.py, `METHODS`). Budget {args.budget_s:.0f} s of "
        f"wall time per run (training + evaluations), {args.parallel} runs in parallel with 1 CPU thread each; seeds "
        f"{seeds}; held-out accuracy = greedy exact final answer on 256 eval-split prompts, every {args.eval_every} "
        "steps and at the end. SE = standard error over seeds; 'better'/'worse' = the difference to GRPO exceeds two "
        "standard errors of the difference (sqrt(SE_m² + SE_grpo²)). Entropy and lengths are of the training "
        "rollouts.\n\n" + table(results, args.budget_s) + "\n" + effects(results) + "\n" + NOTES_MARKER + notes
    )
    args.table.parent.mkdir(parents=True, exist_ok=True)
    args.table.write_text(text)
    return text


# ----------------------------------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=None, help="default: every method of METHODS")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget-s", type=float, default=150.0, help="wall time per run (seconds)")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--parallel", type=int, default=2, help="runs at a time (one CPU thread each)")
    parser.add_argument("--work", type=Path, default=None, help="run folders (default runs/race_chain)")
    parser.add_argument("--png", type=Path, default=None, help="default benchmarks/race_chain.png")
    parser.add_argument("--table", type=Path, default=None, help="default benchmarks/race_chain_results.md")
    parser.add_argument(
        "--smoke", action="store_true", help="seconds: 2 methods, seed 0, 1 step, in one process; temporary files"
    )
    parser.add_argument("--render-only", action="store_true", help="re-read the runs under --work; train nothing")
    parser.add_argument("--set", nargs="+", default=[], help="extra overrides of every run (key=value)")
    parser.add_argument("--one", nargs="+", metavar="METHOD SEED", help=argparse.SUPPRESS)  # a child: its runs, in turn
    args = parser.parse_args(argv)
    extra = (SMOKE_OVERRIDES if args.smoke else []) + args.set
    if args.one:
        if len(args.one) % 2:
            parser.error(f"--one takes METHOD SEED pairs, got {args.one}")
        use_demo(extra)
        for method, seed in zip(args.one[::2], args.one[1::2], strict=True):
            cm.run_one(method, int(seed), args.budget_s, args.eval_every, args.work)
        return 0
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            args.methods, args.seeds, args.eval_every = args.methods or SMOKE_METHODS, [0], 2  # at the start, the end
            args.work = args.work or Path(tmp) / "runs"
            args.png = args.png or Path(tmp) / "race_chain.png"
            args.table = args.table or Path(tmp) / "race_chain_results.md"
            return run(args, parser, extra)
    args.work = args.work or ROOT / "runs" / "race_chain"
    args.png = args.png or BENCHMARKS / "race_chain.png"
    args.table = args.table or BENCHMARKS / "race_chain_results.md"
    return run(args, parser, extra)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, extra: list[str]) -> int:
    unknown = sorted(set(args.methods or ()) - set(METHODS))
    if unknown:
        parser.error(f"--methods {unknown} are not in METHODS; choose from {list(METHODS)}")
    args.methods = args.methods or list(METHODS)
    if not args.render_only:
        validate_methods(args.methods, extra)
        race(args)
    results = [read_run(args.work, m, s) for s in args.seeds for m in args.methods if finished(args.work, m, s)]
    missing = [(m, s) for s in args.seeds for m in args.methods if not finished(args.work, m, s)]
    if missing:
        print(f"not finished (left out): {missing}", flush=True)
    if not results:
        print("no finished run to report", flush=True)
        return 1
    (args.work / "results.json").write_text(json.dumps(results))
    plot(results, args.budget_s, args.png)
    print(write_report(results, args), flush=True)
    return 0 if not missing else 1


if __name__ == "__main__":
    raise SystemExit(main())
