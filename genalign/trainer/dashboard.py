"""The run dashboard: one PNG of what a run logged (``dashboard.png`` in the run folder), and a text summary.

Both are drawn from the run folder's ``metrics.jsonl`` (one record per step) and ``eval.jsonl`` (one per evaluation)
alone, with its ``config.yaml`` for the titles when present. The trainer redraws the dashboard after every evaluation
and at the end of the run; ``genalign report RUN`` redraws it and prints :func:`summarize`.

Panels follow the metric keys the run logged (a panel whose keys are absent is not drawn), in this order; the x axis of
every panel is the training step:

===============================  ==========================================================================================
``reward: <name>``               one per reward (its metric name, :func:`genalign.trainer.rewards.metric_names`): the
                                 training mean and std (dashed) per step, the held-out mean per evaluation (dots)
``combined reward (weighted)``   ``reward/mean`` and ``reward/std`` of the weighted sum the advantages are computed from
                                 (with two or more rewards)
``held-out rewards``             every reward's held-out mean per evaluation (``eval/reward/<name>``), the accuracy
                                 reward (``eval.accuracy_reward``) named in the title
``loss``                         ``loss``
``KL divergence``                ``kl`` (to the reference model), ``approx_kl`` (old -> current policy)
``entropy``                      ``entropy``
``clip fraction``                ``clip_frac``, ``clip_frac_low``, ``clip_frac_high``
completion length                ``completion_length/*``: tokens per completion; for flow models the trained denoising
                                 steps per sample
``rollout: <key>``               one per ``rollout/<key>`` the policy reports (generated tokens, flow steps, NFE, ...)
``gradient norm``                ``grad_norm``, before clipping
``step time (s)``                ``time/*_s`` of the steps (step, rollout, update), evaluations as dots
the others                       ``ratio_*`` (importance ratio), ``frac_reward_zero_std``, ``advantage/abs_mean``,
                                 ``lr``, sample counts, then every other numeric key grouped by its prefix
                                 (``guard/*``, ``reward/<name>/<counter>``, ``eval/...``), titled by the keys
===============================  ==========================================================================================

A metric that holds one value over the whole run (``kl`` without a KL term, ``rollout/num_steps``) is not drawn as a
flat line: the footer lists it with its value. Reward panels are always drawn.
"""

from __future__ import annotations

import math
import os
import re
import sys
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genalign.trainer.metrics import EVAL_FILE, METRICS_FILE, JsonlLog

DASHBOARD_FILE = "dashboard.png"
#: at most this many panels; the keys of the others are named in the footer
MAX_PANELS = 32
COLUMNS = 4
#: keys that are not metrics
_NOT_PLOTTED = {"step", "time/unix"}


@dataclass
class Series:
    """One line of a panel; ``dots``: a marker at each point (evaluations); ``dashed``: a secondary line."""

    label: str
    steps: list[float]
    values: list[float]
    dots: bool = False
    dashed: bool = False


@dataclass
class Panel:
    title: str
    series: list[Series] = field(default_factory=list)


@dataclass
class RunInfo:
    """What the run's ``config.yaml`` says about it (all optional: a dashboard draws without it)."""

    name: str
    family: str | None = None
    model: str | None = None
    max_steps: int | None = None
    reward_names: list[str] = field(default_factory=list)
    accuracy: str | None = None

    @classmethod
    def of(cls, run_dir: Path) -> RunInfo:
        info = cls(name=run_dir.resolve().name)
        path = run_dir / "config.yaml"
        if not path.is_file():
            return info
        import yaml

        try:
            config = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError:
            return info
        policy, run = config.get("policy") or {}, config.get("run") or {}
        info.family, info.model, info.max_steps = policy.get("family"), policy.get("model"), run.get("max_steps")
        try:
            from genalign.config import RewardSpec
            from genalign.trainer.rewards import metric_names

            specs = [RewardSpec(**r) for r in config.get("rewards") or []]
            info.reward_names = metric_names(specs)
            wanted = (config.get("eval") or {}).get("accuracy_reward")
            labels = [s.label for s in specs]
            if wanted in labels:
                info.accuracy = info.reward_names[labels.index(wanted)]
            elif wanted in info.reward_names or (wanted is None and specs):
                info.accuracy = wanted or info.reward_names[0]
        except (TypeError, ValueError):  # a config of another version: names then come from the logged keys
            pass
        return info


def read_logs(run_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The run's step records and evaluation records."""
    return JsonlLog(run_dir / METRICS_FILE).read(), JsonlLog(run_dir / EVAL_FILE).read()


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _points(records: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """``(steps, values)`` of the records where ``key`` is a finite number."""
    pairs = [(r["step"], _number(r.get(key))) for r in records if "step" in r]
    pairs = [(s, v) for s, v in pairs if v is not None]
    return [s for s, _ in pairs], [v for _, v in pairs]


def _is_constant(values: list[float]) -> bool:
    return len(values) >= 2 and max(values) - min(values) <= 1e-12 * max(1.0, abs(values[0]))


def numeric_keys(records: list[dict[str, Any]]) -> list[str]:
    """The keys with a finite number in some record, in first-seen order."""
    keys: dict[str, None] = {}
    for record in records:
        for key, value in record.items():
            if key not in _NOT_PLOTTED and _number(value) is not None:
                keys.setdefault(key)
    return list(keys)


def reward_names(metrics: list[dict[str, Any]], evals: list[dict[str, Any]], info: RunInfo) -> list[str]:
    """The rewards' metric names: the config's order, then any other logged ``reward/<name>/mean``."""
    logged = [m.group(1) for k in numeric_keys(metrics) if (m := re.fullmatch(r"reward/(.+)/mean", k))]
    if not logged:
        logged = [m.group(1) for k in numeric_keys(evals) if (m := re.fullmatch(r"eval/reward/([^/]+)", k))]
    names = [n for n in info.reward_names if n in logged]
    return names + [n for n in logged if n not in names]


def _length_title(family: str | None) -> str:
    """The length panel's title: what one trained action of the family is (its traits' ``action_unit``)."""
    if family is not None:
        from genalign.policies import traits_of_family

        try:
            return traits_of_family(family).action_unit
        except (KeyError, ValueError, ImportError):  # a family this installation does not know
            pass
    return "completion length (actions per sample)"


#: panels of named keys after the rewards, in order: (title, [(key, series label)]); ``None``: the family's title
_DIAGNOSTICS: list[tuple[str | None, list[tuple[str, str]]]] = [
    ("loss", [("loss", "loss")]),
    ("KL divergence", [("kl", "to the reference (kl)"), ("approx_kl", "old -> current policy (approx_kl)")]),
    ("entropy", [("entropy", "entropy")]),
    ("clip fraction", [("clip_frac", "clip_frac"), ("clip_frac_low", "low side"), ("clip_frac_high", "high side")]),
    (None, []),  # completion length: the completion_length/* keys, then one panel per rollout/<key>
    ("gradient norm (before clipping)", [("grad_norm", "grad_norm")]),
    (
        "step time (s)",
        [
            ("time/step_s", "step"),
            ("time/rollout_s", "rollout"),
            ("time/update_s", "update"),
            ("time/rollout_worker_s", "rollout worker"),
        ],
    ),
    ("importance ratio", [("ratio_mean", "mean"), ("ratio_min", "min"), ("ratio_max", "max")]),
    ("groups with zero reward std (fraction)", [("frac_reward_zero_std", "frac_reward_zero_std")]),
    ("mean |advantage|", [("advantage/abs_mean", "advantage/abs_mean")]),
    ("learning rate", [("lr", "lr")]),
    ("samples per step", [("num_samples", "sampled"), ("num_trained_samples", "trained")]),
]


def build_panels(
    metrics: list[dict[str, Any]], evals: list[dict[str, Any]], info: RunInfo
) -> tuple[list[Panel], dict[str, float]]:
    """The dashboard's panels (the module docstring's order) and the metrics held constant over the run."""
    panels: list[Panel] = []
    constants: dict[str, float] = {}
    keys, eval_keys = numeric_keys(metrics), numeric_keys(evals)
    claimed: set[str] = set()

    def line(records: list[dict[str, Any]], key: str, label: str, *, dots: bool = False, dashed: bool = False,
             always: bool = False) -> Series | None:  # fmt: skip
        """The series of ``key`` (None when absent, or constant and not ``always`` drawn); the key is claimed."""
        steps, values = _points(records, key)
        claimed.add(key)
        if not values:
            return None
        if _is_constant(values) and not always:
            constants[key] = values[0]
            return None
        return Series(label, steps, values, dots=dots, dashed=dashed)

    def add(title: str, series: Iterable[Series | None]) -> None:
        drawn = [s for s in series if s is not None]
        if drawn:
            panels.append(Panel(title, drawn))

    names = reward_names(metrics, evals, info)
    for name in names:
        add(f"reward: {name}", [
            line(metrics, f"reward/{name}/mean", "train (mean)", always=True),
            line(metrics, f"reward/{name}/std", "train (std)", dashed=True, always=True),
            line(evals, f"eval/reward/{name}", "held-out (mean)", dots=True, always=True),
        ])  # fmt: skip
    if len(names) > 1:
        add("combined reward (weighted)", [line(metrics, "reward/mean", "train (mean)", always=True),
                                           line(metrics, "reward/std", "train (std)", dashed=True, always=True)])  # fmt: skip
    claimed |= {"reward/mean", "reward/std", "eval/accuracy"}  # (one reward: its own panel shows them)
    held_out = [line(evals, f"eval/reward/{name}", name, dots=True, always=True) for name in names]
    accuracy = f" (accuracy: {info.accuracy})" if info.accuracy in names else ""
    add(f"held-out rewards{accuracy}", held_out)

    for title, members in _DIAGNOSTICS:
        if title is None:
            lengths = [k for k in keys if k.startswith("completion_length/")]
            add(_length_title(info.family), [line(metrics, k, k.split("/", 1)[1]) for k in lengths])
            for key in (k for k in keys if k.startswith("rollout/")):
                add(f"rollout: {key.split('/', 1)[1]}", [line(metrics, key, key.split("/", 1)[1])])
            continue
        series = [line(metrics, key, label) for key, label in members if key in keys]
        if title == "step time (s)":
            series.append(line(evals, "time/eval_s", "evaluation", dots=True))
        add(title, series)

    for records, available in ((metrics, keys), (evals, eval_keys)):
        groups: dict[str, list[str]] = {}
        for key in available:
            if key not in claimed and key != "time/eval_s":
                groups.setdefault(key.rsplit("/", 1)[0] if "/" in key else key, []).append(key)
        for prefix, members in groups.items():
            drawn = [(k, s) for k in members if (s := line(records, k, k.rsplit("/", 1)[-1])) is not None]
            if len(drawn) == 1:  # one moving key: the panel is titled by the key itself
                drawn[0][1].label = drawn[0][0]
            add(drawn[0][0] if len(drawn) == 1 else f"{prefix}/*", [s for _, s in drawn])
    return panels, constants


def _footer(constants: dict[str, float], left_out: list[str]) -> str:
    by_value: dict[str, list[str]] = {}
    for key, value in constants.items():
        by_value.setdefault(f"{value:.4g}", []).append(key)
    parts = [f"{', '.join(keys)} = {value}" for value, keys in by_value.items()]
    text = ("constant over the run: " + "; ".join(parts)) if parts else ""
    if left_out:
        text += f"{' | ' if text else ''}not drawn (more than {MAX_PANELS} panels): {', '.join(left_out)}"
    return text


def draw_dashboard(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw the dashboard of ``run_dir`` into ``out`` (default ``run_dir/dashboard.png``); returns the path.

    The file is replaced atomically, so a reader never sees half a PNG.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    run_dir = Path(run_dir)
    path = Path(out) if out is not None else run_dir / DASHBOARD_FILE
    metrics, evals = read_logs(run_dir)
    info = RunInfo.of(run_dir)
    panels, constants = build_panels(metrics, evals, info)
    left_out = [p.title for p in panels[MAX_PANELS:]]
    panels = panels[:MAX_PANELS] or [Panel("no metrics logged yet")]
    columns = min(COLUMNS, len(panels))
    rows = math.ceil(len(panels) / columns)
    footer = textwrap.wrap(_footer(constants, left_out), 40 * columns)
    width, header_in, footer_in = 4.1 * columns, 0.6, 0.45 + 0.15 * len(footer)
    height = 2.5 * rows + header_in + footer_in
    fig = Figure(figsize=(width, height))  # no pyplot: no global figure state, safe in any thread
    axes = fig.subplots(rows, columns, squeeze=False)
    fig.subplots_adjust(left=0.65 / width, right=1 - 0.15 / width, bottom=footer_in / height,
                        top=1 - header_in / height, wspace=0.3, hspace=0.42)  # fmt: skip
    for ax, panel in zip(axes.flat, panels):
        for series in panel.series:
            marker = "o" if series.dots else ("." if len(series.steps) < 3 else None)
            ax.plot(series.steps, series.values, label=series.label, linewidth=0.8 if series.dashed else 1.1,
                    linestyle="--" if series.dashed else "-", marker=marker, markersize=3.5)  # fmt: skip
        ax.set_title(panel.title, fontsize=9.5)
        ax.tick_params(labelsize=7.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.grid(alpha=0.3)
        if len(panel.series) > 1 or (panel.series and panel.series[0].dots):
            ax.legend(fontsize=7, loc="best")
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    last = metrics[-1]["step"] if metrics else (evals[-1]["step"] if evals else 0)
    of = f" of {info.max_steps}" if info.max_steps else ""
    what = " ".join(str(x) for x in (info.family, info.model) if x)
    fig.suptitle(f"{info.name}{' (' + what + ')' if what else ''}: step {last}{of}, {len(evals)} evaluations"
                 "  (x axis: training step)", fontsize=11)  # fmt: skip
    if footer:
        fig.text(0.01, 0.01, "\n".join(footer), fontsize=7.5, va="bottom", ha="left", family="monospace")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=80, format="png")
    tmp.replace(path)
    return path


#: ``GENALIGN_DASHBOARD=0`` turns the in-training redraw off where ``run.dashboard`` is left unset (null)
DASHBOARD_ENV = "GENALIGN_DASHBOARD"


def dashboard_enabled(setting: bool | None) -> bool:
    """Whether the trainer redraws the dashboard: ``run.dashboard`` when set, else on unless the environment's
    ``GENALIGN_DASHBOARD`` is ``0`` / ``false`` / ``no`` / ``off``."""
    if setting is not None:
        return setting
    return os.environ.get(DASHBOARD_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def refresh_dashboard(run_dir: Path) -> Path | None:
    """The trainer's call (after each evaluation, at the end): redraw, and on a drawing failure other than a full or
    read-only disk (which the trainer handles) say so on stderr and keep training."""
    from genalign.trainer.disk_space import is_disk_error

    try:
        return draw_dashboard(run_dir)
    except Exception as err:  # a plot must never end a run; the logs it is drawn from are intact
        if is_disk_error(err):
            raise
        print(f"genalign: could not draw {run_dir / DASHBOARD_FILE} ({type(err).__name__}: {err}); "
              "training goes on; `genalign report RUN` redraws it from the logs", file=sys.stderr)  # fmt: skip
        return None


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _wall_time(metrics: list[dict[str, Any]], evals: list[dict[str, Any]]) -> str:
    """Wall time from the start of the first record (a step or an evaluation) to the end of the last one (``time/unix``
    stamps: the loading of the model before the first record does not count, the pause of a resumed run does), and the
    time spent in steps and in evaluations."""
    step_s = sum(v for v in (_number(m.get("time/step_s")) for m in metrics) if v is not None)
    eval_s = sum(v for v in (_number(e.get("time/eval_s")) for e in evals) if v is not None)
    spans = [(r["time/unix"] - (_number(r.get(k)) or 0.0), r["time/unix"])
             for records, k in ((metrics, "time/step_s"), (evals, "time/eval_s"))
             for r in records if _number(r.get("time/unix")) is not None]  # fmt: skip
    parts = f"steps {_duration(step_s)}" + (f", evaluations {_duration(eval_s)}" if eval_s else "")
    if not spans:
        return f"wall time not logged ({parts})"
    total = max(end for _, end in spans) - min(start for start, _ in spans)
    return f"wall time {_duration(total)} ({parts})"


def _fmt(value: Any) -> str:
    number = _number(value)
    return "n/a" if number is None else f"{number:.4g}"


def summarize(run_dir: str | Path) -> str:
    """A few lines about a run: steps, wall time, the best held-out accuracy and its step, the last values of the
    main metrics."""
    run_dir = Path(run_dir)
    metrics, evals = read_logs(run_dir)
    info = RunInfo.of(run_dir)
    what = " ".join(str(x) for x in (info.family, info.model) if x)
    last = metrics[-1] if metrics else {}
    steps = f"{last.get('step', 0)}{' of ' + str(info.max_steps) if info.max_steps else ''} steps"
    lines = [f"run {run_dir}{' (' + what + ')' if what else ''}: {steps}, {len(evals)} evaluations, "
             f"{_wall_time(metrics, evals)}"]  # fmt: skip
    scored = [(e["step"], v) for e in evals if (v := _number(e.get("eval/accuracy"))) is not None]
    if scored:
        best_step, best = max(scored, key=lambda sv: (sv[1], -sv[0]))
        name = f"held-out accuracy ({info.accuracy})" if info.accuracy else "held-out accuracy"
        lines.append(f"{name}: best {best:.4g} at step {best_step}; first {scored[0][1]:.4g} (step {scored[0][0]}), "
                     f"last {scored[-1][1]:.4g} (step {scored[-1][0]})")  # fmt: skip
    if metrics:
        window = min(10, len(metrics) // 2)
        first = [v for m in metrics[:window] if (v := _number(m.get("reward/mean"))) is not None]
        final = [v for m in metrics[len(metrics) - window :] if (v := _number(m.get("reward/mean"))) is not None]
        if window and first and final:
            lines.append(f"train reward (weighted, mean of the first / last {window} steps): "
                         f"{sum(first) / len(first):.4g} -> {sum(final) / len(final):.4g}")  # fmt: skip
        names = reward_names(metrics, evals, info)
        values = [f"reward {n} {_fmt(last.get(f'reward/{n}/mean'))}" for n in names]
        main = [("loss", "loss"), ("kl", "kl"), ("entropy", "entropy"), ("clip_frac", "clip_frac"),
                ("completion_length/mean", "completion_length"), ("grad_norm", "grad_norm"),
                ("time/step_s", "step_s")]  # fmt: skip
        values += [f"{label} {_fmt(last[key])}" for key, label in main if key in last]
        lines.append(f"last step ({last.get('step')}): " + ", ".join(values))
    if not metrics and not evals:
        lines.append(f"no records yet in {run_dir / METRICS_FILE} or {run_dir / EVAL_FILE}")
    return "\n".join(lines)


def report(run_dir: str | Path) -> str:
    """``genalign report RUN``: redraw the dashboard and return the summary, ending with the dashboard's path."""
    run_dir = Path(run_dir)
    if not ((run_dir / METRICS_FILE).is_file() or (run_dir / EVAL_FILE).is_file()):
        from genalign.errors import UserPathError

        raise UserPathError(
            f"{run_dir}: no {METRICS_FILE} or {EVAL_FILE} here; give the folder of a training run (its run.output_dir)."
        )
    path = draw_dashboard(run_dir)
    return f"{summarize(run_dir)}\ndashboard: {path}"
