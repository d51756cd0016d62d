"""On-policy distillation (OPD) from a stronger teacher vs GRPO on the arith-lm demo: held-out accuracy by step and by
training time, steps and seconds to a held-out target, mean ± standard error over seeds (issue 29 item 5).

The published claim checked ([88], [93], [13]: the headline of the OPD papers): a student trained with the dense
per-token signal of a stronger teacher reaches a held-out target in fewer steps or less time than GRPO with the
reward alone, on the same task.

1. **Teacher.** The GRPO demo (configs/demo_arith_grpo.yaml, its own seed) trained ``--teacher-steps`` steps: the
   [88] recipe (make the teacher with RL first). ``--teacher FOLDER`` reuses a policy folder instead (e.g.
   ``runs/demo_arith_grpo/checkpoints/step-40/policy``); its held-out accuracy is then measured by the step-0
   evaluation of a one-step run from it.
2. **Student.** The untrained demo model (``builtin:arith-lm``, held-out 0.309), for every seed (``run.seed``) and
   every method of :data:`METHODS`: GRPO alone (the preset), pure OPD (``reward_weight: 0``, the teacher's per-token
   log-ratio as the only advantage) and OPD mixed with the reward (docs/teachers.md's weight schedule: dense weight
   1 → 0.25, reward weight 1). The methods of one seed see the same prompts at every step (the prompt stream and each
   step's randomness are seeded by ``run.seed`` and the step), which the report checks on every step's sample dump.
   Every run evaluates the same 256 held-out prompts greedily every ``--eval-every`` steps (evaluation noise is
   seeded by ``eval.seed``, so evaluating more often changes nothing in training).
3. **Report.** Held-out accuracy at fixed steps, steps and training seconds (sum of ``time/step_s``: rollout, teacher
   pass and update; evaluations not counted) to each target, mean ± SE over seeds and the paired difference to GRPO
   (same seed: same prompts and start), and a PNG (held-out accuracy against step and against training time, and the
   per-token reverse KL to the teacher; mean ± SE bands). Text below ``<!-- notes -->`` of an existing result file is
   kept when the file is rewritten.

Runs train one after another in this process with one CPU thread each::

    python benchmarks/opd_vs_grpo.py --seeds 0 1 2 3 4 --steps 20 --eval-every 1   # the committed run (15 min)
    python benchmarks/opd_vs_grpo.py --teacher runs/demo_arith_grpo/checkpoints/step-40/policy   # reuse a teacher
    python benchmarks/opd_vs_grpo.py --render-only                                 # re-read runs/opd_vs_grpo
    python benchmarks/opd_vs_grpo.py --smoke    # seconds: 1-step teacher, 1 seed x 3 methods x 2 steps, temp files

Finished runs under ``--work`` are reused (a rerun after an interruption trains only what is missing); a rerun with
another teacher, step count, evaluation interval or smoke setting is refused (``plan.json``): give another ``--work``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCHMARKS))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from compare_methods import _at_step, _grid_values, _read  # noqa: E402
from race_chain import mean_se  # noqa: E402

from genalign.config import load_config  # noqa: E402
from genalign.trainer import train  # noqa: E402

PRESET = ROOT / "configs" / "demo_arith_grpo.yaml"

#: method -> its ``algorithm.credit`` (None: GRPO alone, no teacher); the rest of the preset is shared
METHODS: dict[str, str | None] = {
    "grpo": None,
    "opd": "[{name: opd, reward_weight: 0.0}]",  # pure OPD: the teacher's per-token log-ratio is the advantage
    "opd_mixed": "[{name: opd, coef: 1.0, coef_end: 0.25, reward_weight: 1.0}]",  # docs/teachers.md's mixing
}

#: every run (teacher and students): one thread, no progress bar, no dashboard
QUIET = ["run.num_threads=1", "run.progress_bar=false", "run.dashboard=false", "run.save_every=0"]
#: every student run dumps every sample of every step (the prompt check) and evaluates at the start
STUDENT = ["run.sample_every=1", "run.samples_per_dump=100000", "eval.at_start=true"]
#: ``--smoke``: small batches, evaluations and training set
SMOKE_OVERRIDES = ["algorithm.prompts_per_step=2", "eval.num_prompts=8", "eval.batch_size=8",
                   "data.train.args.size=256"]  # fmt: skip
NOTES_MARKER = "<!-- notes -->"


@dataclass(frozen=True)
class Teacher:
    """The teacher's policy folder, its held-out accuracy (the students' evaluation) and how it was made."""

    path: str
    accuracy: float
    origin: str

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "accuracy": self.accuracy, "origin": self.origin}


# ----------------------------------------------------------------------------------------------------------------------
# running
# ----------------------------------------------------------------------------------------------------------------------


def run_dir(work: Path, method: str, seed: int) -> Path:
    return work / f"{method}-seed{seed}"


def finished(folder: Path) -> bool:
    return (folder / "eval.json").exists()


def train_fresh(overrides: list[str], folder: Path) -> None:
    """Train the preset with ``overrides`` into ``folder`` (a folder an unfinished run left is removed first)."""
    if folder.exists():
        shutil.rmtree(folder)
    train(load_config(PRESET, [*overrides, f"run.output_dir={folder}"]))


def last_accuracy(folder: Path, step: int | None = None) -> float:
    """Held-out accuracy of a run's last evaluation (or of its evaluation at ``step``)."""
    evals = [e for e in _read(folder / "eval.jsonl") if step is None or e["step"] == step]
    return evals[-1]["eval/accuracy"]


def make_teacher(args: argparse.Namespace, extra: list[str]) -> Teacher:
    """Train the GRPO demo ``args.teacher_steps`` steps from the preset's seed (reused when finished under
    ``args.work``), or measure the given ``args.teacher`` (a one-step run from it: its step-0 evaluation)."""
    if args.teacher is None:
        folder = args.work / "teacher"
        if not finished(folder):
            steps = args.teacher_steps
            train_fresh([*QUIET, "run.sample_every=0", f"run.max_steps={steps}", "eval.every=0", *extra], folder)
        steps = max(r["step"] for r in _read(folder / "metrics.jsonl"))
        if steps != args.teacher_steps:
            raise SystemExit(f"{folder} holds a teacher of {steps} steps, not --teacher-steps {args.teacher_steps}: "
                             "give another --work, or remove that folder")  # fmt: skip
        policy = folder / "checkpoints" / f"step-{steps}" / "policy"
        origin = f"GRPO demo ({PRESET.relative_to(ROOT)}, its seed) trained {steps} step(s)"
        teacher = Teacher(str(policy), last_accuracy(folder), origin)
    else:
        given = Path(args.teacher)
        path = given / "policy" if (given / "policy").is_dir() else given
        folder = args.work / "teacher-eval"
        train_fresh([*QUIET, "run.sample_every=0", "run.max_steps=1", "eval.every=0", "eval.at_start=true",
                     f"policy.model={json.dumps(str(path))}", *extra], folder)  # fmt: skip
        teacher = Teacher(str(path), last_accuracy(folder, step=0), f"given: {args.teacher}")
    return teacher


def check_plan(work: Path, plan: dict[str, Any]) -> None:
    """Record what the runs under ``work`` are trained with (``plan.json``); refuse a rerun that would mix them with
    runs of another plan (finished runs are reused)."""
    path = work / "plan.json"
    if path.exists() and (previous := json.loads(path.read_text())) != plan:
        raise SystemExit(
            f"--work {work} holds runs trained with {previous}, not {plan}: give another --work, or remove that folder"
        )
    path.write_text(json.dumps(plan))


def student_overrides(method: str, seed: int, args: argparse.Namespace, teacher: Teacher) -> list[str]:
    credit = METHODS[method]
    distill = [] if credit is None else [
        f"algorithm.teacher={{source: model, model: {json.dumps(teacher.path)}}}", f"algorithm.credit={credit}",
    ]  # fmt: skip
    return [*distill, *QUIET, *STUDENT, f"run.seed={seed}", f"run.max_steps={args.steps}",
            f"eval.every={args.eval_every}"]  # fmt: skip


def race(args: argparse.Namespace, teacher: Teacher, extra: list[str]) -> None:
    """Every (seed, method) not finished yet, one after another; every config is built before the first run."""
    plan = {(m, s): [*student_overrides(m, s, args, teacher), *extra] for s in args.seeds for m in args.methods}
    for (method, seed), overrides in plan.items():
        try:
            load_config(PRESET, [*overrides, f"run.output_dir={run_dir(args.work, method, seed)}"])
        except Exception as error:
            raise SystemExit(f"method {method!r} (seed {seed}) does not validate on {PRESET.name}: {error}") from error
    for (method, seed), overrides in plan.items():
        folder = run_dir(args.work, method, seed)
        if not finished(folder):
            started = time.perf_counter()
            train_fresh(overrides, folder)
            print(f"{method} seed {seed}: {time.perf_counter() - started:.0f} s wall", flush=True)


# ----------------------------------------------------------------------------------------------------------------------
# reading runs
# ----------------------------------------------------------------------------------------------------------------------


def step_prompts(folder: Path) -> dict[int, list[str]]:
    """Step -> the step's distinct prompts in order, from the sample dumps (every sample of every step)."""
    prompts = {}
    for path in (folder / "samples").glob("step-*.jsonl"):
        records = [json.loads(line) for line in path.read_text().splitlines() if line]
        prompts[int(path.stem.split("-")[1])] = list(dict.fromkeys(r["prompt"] for r in records))
    return prompts


def read_run(work: Path, method: str, seed: int) -> dict[str, Any]:
    """A finished run's held-out accuracy by step and by training time (cumulative ``time/step_s``), its per-token
    reverse KL to the teacher by step, and its mean step time."""
    folder = run_dir(work, method, seed)
    steps = _read(folder / "metrics.jsonl")
    clock, elapsed = {0: 0.0}, 0.0
    for record in steps:
        elapsed += record["time/step_s"]
        clock[record["step"]] = elapsed
    evals = [e for e in _read(folder / "eval.jsonl") if e["step"] in clock]
    return {
        "method": method,
        "seed": seed,
        "steps": len(steps),
        "seconds_per_step": statistics.fmean(r["time/step_s"] for r in steps),
        "accuracy_by_step": [(e["step"], e["eval/accuracy"]) for e in evals],
        "accuracy_by_time": [(clock[e["step"]], e["eval/accuracy"]) for e in evals],
        "reverse_kl": [(r["step"], r["teacher/reverse_kl"]) for r in steps if "teacher/reverse_kl" in r],
    }


def prompt_mismatches(work: Path, methods: list[str], seeds: list[int]) -> tuple[int, list[str]]:
    """``(compared, mismatches)``: the (seed, step) pairs whose prompts were compared across methods, and those where
    some method's prompts differ from the first method's."""
    compared, mismatches = 0, []
    for seed in seeds:
        by_method = {m: step_prompts(run_dir(work, m, seed)) for m in methods}
        first = by_method[methods[0]]
        for step in sorted(first):
            compared += 1
            differing = [m for m in methods[1:] if by_method[m].get(step) != first[step]]
            if differing:
                mismatches.append(f"seed {seed} step {step}: {', '.join(differing)} differ from {methods[0]}")
    return compared, mismatches


# ----------------------------------------------------------------------------------------------------------------------
# statistics
# ----------------------------------------------------------------------------------------------------------------------


def first_reaching(points: list[tuple[float, float]], target: float) -> float:
    """The x of the first point whose accuracy is ``>= target`` (inf if none): the step, or the training seconds,
    of the first evaluation at the target."""
    return next((x for x, accuracy in points if accuracy >= target), math.inf)


def paired_difference(values: list[float], baseline: list[float]) -> tuple[float, float, int]:
    """Mean and standard error of the per-seed differences ``values[i] − baseline[i]`` over the seeds where both are
    finite, and the number of such seeds (the runs of one seed share their prompts and start: a paired design)."""
    pairs = [v - b for v, b in zip(values, baseline, strict=True) if math.isfinite(v) and math.isfinite(b)]
    mean, se = mean_se(pairs)
    return mean, se, len(pairs)


def verdict(mean: float, se: float, n: int, lower_is: str, higher_is: str) -> str:
    """``lower_is`` or ``higher_is`` when the paired difference is beyond two standard errors, else ``within 2 SE``."""
    if n < 2 or not math.isfinite(mean):
        return "too few seeds"
    return lower_is if mean < -2 * se else higher_is if mean > 2 * se else "within 2 SE"


def _pm(value: tuple[float, float], digits: int = 3) -> str:
    return f"{value[0]:.{digits}f} ± {value[1]:.{digits}f}"


def by_method(results: list[dict[str, Any]], methods: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Method -> its runs in seed order (every method has the same seeds)."""
    return {m: sorted((r for r in results if r["method"] == m), key=lambda r: r["seed"]) for m in methods}


def accuracy_table(grouped: dict[str, list[dict[str, Any]]], report_steps: list[int]) -> str:
    header = " | ".join(f"step {s}" for s in report_steps)
    lines = [
        f"| method | s/step | {header} |",
        "|---|---|" + "---|" * len(report_steps),
    ]
    for method, runs in grouped.items():
        cells = [_pm(mean_se([_at_step(r, step) for r in runs])) for step in report_steps]
        lines.append(f"| {method} | {_pm(mean_se([r['seconds_per_step'] for r in runs]), 2)} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def target_table(grouped: dict[str, list[dict[str, Any]]], targets: list[float]) -> str:
    lines = [
        "| target | method | reached | steps to target (mean ± SE) | per seed | Δ steps vs GRPO (paired) | "
        "training s to target (mean ± SE) | per seed | Δ s vs GRPO (paired) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    base = grouped.get("grpo", [])
    for target in targets:
        base_steps = [first_reaching(r["accuracy_by_step"], target) for r in base]
        base_seconds = [first_reaching(r["accuracy_by_time"], target) for r in base]
        for method, runs in grouped.items():
            steps = [first_reaching(r["accuracy_by_step"], target) for r in runs]
            seconds = [first_reaching(r["accuracy_by_time"], target) for r in runs]
            reached = sum(math.isfinite(s) for s in steps)
            cells = [f"{target:.2f}", method, f"{reached}/{len(runs)}",
                     _reached_mean(steps), _per_seed(steps, 0), _delta(steps, base_steps, method, "fewer", "more", 1),
                     _reached_mean(seconds), _per_seed(seconds, 0),
                     _delta(seconds, base_seconds, method, "less", "more", 1)]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _reached_mean(values: list[float]) -> str:
    """Mean ± SE over the seeds that reached the target ("—" if none did)."""
    reached = [v for v in values if math.isfinite(v)]
    return _pm(mean_se(reached), 1) if reached else "—"


def _per_seed(values: list[float], digits: int) -> str:
    return ", ".join("never" if not math.isfinite(v) else f"{v:.{digits}f}" for v in values)


def _delta(values: list[float], base: list[float], method: str, lower: str, higher: str, digits: int) -> str:
    if method == "grpo" or not base:
        return "—"
    mean, se, n = paired_difference(values, base)
    if n == 0:
        return "no seed where both reached it"
    return f"{mean:+.{digits}f} ± {se:.{digits}f} ({verdict(mean, se, n, lower, higher)}, {n} seeds)"


# ----------------------------------------------------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------------------------------------------------


def plot(grouped: dict[str, list[dict[str, Any]]], teacher: Teacher, targets: list[float], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_step, ax_time, ax_kl) = plt.subplots(1, 3, figsize=(18, 5))
    for method, runs in grouped.items():
        max_step = min(r["accuracy_by_step"][-1][0] for r in runs)
        horizon = min(r["accuracy_by_time"][-1][0] for r in runs)  # the training time every run of the method reached
        panels = [
            (ax_step, [r["accuracy_by_step"] for r in runs], list(range(max_step + 1))),
            (ax_time, [r["accuracy_by_time"] for r in runs], [horizon * i / 200 for i in range(201)]),
            (ax_kl, [r["reverse_kl"] for r in runs if r["reverse_kl"]], list(range(1, max_step + 1))),
        ]
        color = None
        for ax, curves, grid in panels:
            if not curves:
                continue
            stats = [mean_se(list(column)) for column in zip(*_grid_values(curves, grid))]
            mean = [m for m, _ in stats]
            (line,) = ax.plot(grid, mean, label=method, color=color)
            color = line.get_color()
            ax.fill_between(grid, [m - s for m, s in stats], [m + s for m, s in stats], color=color, alpha=0.15)
    for ax in (ax_step, ax_time):
        ax.axhline(teacher.accuracy, color="black", linestyle=":", label=f"teacher ({teacher.accuracy:.3f})")
        for target in targets:
            ax.axhline(target, color="grey", linestyle="--", linewidth=0.8)
        ax.set_ylabel("held-out accuracy (greedy)")
        ax.legend(fontsize=8, loc="lower right")
    ax_step.set(title="held-out accuracy by step", xlabel="training step (same prompts for every method of a seed)")
    ax_time.set(title="held-out accuracy by training time", xlabel="training seconds (rollout + teacher + update)")
    ax_kl.set(title="reverse KL to the teacher (teacher/reverse_kl)", xlabel="training step", ylabel="nats per token")
    ax_kl.legend(fontsize=8)
    seeds = sorted({r["seed"] for runs in grouped.values() for r in runs})
    fig.suptitle(f"OPD vs GRPO, arith-lm demo, seeds {seeds}: mean over seeds, band ± 1 SE; dashed lines: the targets")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)
    plt.close(fig)


def environment() -> str:
    """The checkout (``-dirty``: with uncommitted changes), versions, cores and load, at the end of the runs."""
    try:
        commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    return (f"commit {commit}, Python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPU "
            f"cores, 1 thread per run, load average at the end {load}")  # fmt: skip


def write_report(results: list[dict[str, Any]], teacher: Teacher, args: argparse.Namespace, trained: dict) -> str:
    """The results markdown; ``trained``: the ``command``, ``wall_s`` and ``environment`` of the training run."""
    grouped = by_method(results, args.methods)
    last = min(r["accuracy_by_step"][-1][0] for r in results)
    report_steps = sorted({s for s in (0, *range(5, last + 1, 5), last)})
    compared, mismatches = prompt_mismatches(args.work, args.methods, args.seeds)
    same = (
        f"Prompts per step: identical across the methods in all {compared} (seed, step) pairs compared (sample dumps)."
        if not mismatches
        else f"Prompts per step DIFFER in {len(mismatches)} of {compared} (seed, step) pairs: {'; '.join(mismatches)}."
    )
    student = _pm(mean_se([_at_step(r, 0) for r in results]))
    notes = ""
    if args.table.exists() and NOTES_MARKER in args.table.read_text():
        notes = args.table.read_text().split(NOTES_MARKER, 1)[1]
    text = (
        "# On-policy distillation vs GRPO on the arith-lm demo\n\n"
        f"Command: `{trained['command']}` ({trained['wall_s'] / 60:.1f} min wall, teacher included; "
        f"{trained['environment']}).\n\n"
        f"Teacher: {teacher.origin}, held-out accuracy **{teacher.accuracy:.3f}** (`{_short(teacher.path)}`). "
        f"Student: the untrained `builtin:arith-lm`, held-out accuracy {student} at step 0. Base config: preset "
        f"{PRESET.relative_to(ROOT)} (GRPO); methods (`algorithm.credit`, with the teacher for the OPD ones): "
        + "; ".join(f"`{m}` {METHODS[m] or '(none: GRPO alone)'}" for m in args.methods)
        + f". Seeds {args.seeds} (`run.seed`), {args.steps} steps each, held-out evaluation every {args.eval_every} "
        "step(s): greedy exact match on the preset's 256 eval-split prompts. SE = standard error over seeds; Δ = "
        "mean ± SE of the per-seed difference to GRPO (same seed: same prompts, same start); 'fewer'/'less' or "
        "'more' when it exceeds 2 SE. Training seconds = sum of `time/step_s` (rollout, teacher pass, update; "
        "evaluations not counted) on a shared machine.\n\n"
        f"{same}\n\n## Held-out accuracy at fixed steps (mean ± SE)\n\n{accuracy_table(grouped, report_steps)}\n"
        f"## Steps and training seconds to the target\n\n{target_table(grouped, args.targets)}\n"
        f"Curve: `{_short(args.png)}`.\n\n{NOTES_MARKER}{notes}"
    )
    args.table.parent.mkdir(parents=True, exist_ok=True)
    args.table.write_text(text)
    return text


def _short(path: str | Path) -> str:
    """A path relative to the checkout when it is inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# ----------------------------------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=20, help="training steps of every student run")
    parser.add_argument("--eval-every", type=int, default=1, help="held-out evaluation every N steps")
    parser.add_argument("--targets", nargs="+", type=float, default=[0.90, 0.95], help="held-out accuracy targets")
    parser.add_argument("--teacher", default=None, help="a policy folder to use as the teacher (default: train one)")
    parser.add_argument("--teacher-steps", type=int, default=40, help="GRPO steps of the teacher made here")
    parser.add_argument("--work", type=Path, default=None, help="run folders (default runs/opd_vs_grpo)")
    parser.add_argument("--png", type=Path, default=None, help="default benchmarks/opd_vs_grpo.png")
    parser.add_argument("--table", type=Path, default=None, help="default benchmarks/opd_vs_grpo_results.md")
    parser.add_argument("--render-only", action="store_true", help="re-read the runs under --work; train nothing")
    parser.add_argument(
        "--smoke", action="store_true", help="seconds: a 1-step teacher, seed 0, 2 steps per method, 8 evaluation "
        "prompts; run folders, PNG and table in a temporary folder unless given"
    )  # fmt: skip
    raw = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(raw)
    command = " ".join(["python benchmarks/opd_vs_grpo.py", *map(shlex.quote, raw)])
    if "grpo" not in args.methods:
        parser.error(f"--methods {args.methods} must include grpo (the baseline of every difference)")
    if min(args.steps, args.eval_every, args.teacher_steps) < 1:
        parser.error("--steps, --eval-every and --teacher-steps must be >= 1")
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            args.seeds, args.steps, args.teacher_steps = [0], 2, 1
            args.work = args.work or Path(tmp) / "runs"
            args.png = args.png or Path(tmp) / "opd_vs_grpo.png"
            args.table = args.table or Path(tmp) / "opd_vs_grpo_results.md"
            return run(args, SMOKE_OVERRIDES, command)
    args.work = args.work or ROOT / "runs" / "opd_vs_grpo"
    args.png = args.png or BENCHMARKS / "opd_vs_grpo.png"
    args.table = args.table or BENCHMARKS / "opd_vs_grpo_results.md"
    return run(args, [], command)


def run(args: argparse.Namespace, extra: list[str], command: str) -> int:
    """Make (or re-read) the teacher, train every run not finished yet, then write the PNG and the report.
    ``--render-only`` takes the runs' settings, command and environment from ``results.json`` when it is there."""
    started = time.perf_counter()
    torch.set_num_threads(1)
    args.work.mkdir(parents=True, exist_ok=True)
    saved = args.work / "results.json"
    settings, trained_keys = ("methods", "seeds", "steps", "eval_every"), ("command", "wall_s", "environment")
    previous = json.loads(saved.read_text()) if args.render_only and saved.exists() else None
    if previous is not None:
        for key in settings:
            setattr(args, key, previous[key])
    if args.render_only:
        teacher = Teacher(**json.loads((args.work / "teacher.json").read_text()))
    else:
        teacher = make_teacher(args, extra)
        print(f"teacher: {teacher.origin}, held-out accuracy {teacher.accuracy:.3f}", flush=True)
        check_plan(args.work, {"teacher": teacher.path, "steps": args.steps, "eval_every": args.eval_every,
                               "extra": extra})  # fmt: skip
        (args.work / "teacher.json").write_text(json.dumps(teacher.as_dict()))
        race(args, teacher, extra)
    missing = [(m, s) for s in args.seeds for m in args.methods if not finished(run_dir(args.work, m, s))]
    if missing:
        print(f"not finished: {missing}", flush=True)
        return 1
    if previous is not None:
        trained = {key: previous[key] for key in trained_keys}
    else:
        trained = dict(zip(trained_keys, (command, time.perf_counter() - started, environment()), strict=True))
    results = [read_run(args.work, m, s) for s in args.seeds for m in args.methods]
    record = {key: getattr(args, key) for key in settings} | trained | {"teacher": teacher.as_dict(), "runs": results}
    saved.write_text(json.dumps(record))
    plot(by_method(results, args.methods), teacher, args.targets, args.png)
    print(write_report(results, teacher, args, trained), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
