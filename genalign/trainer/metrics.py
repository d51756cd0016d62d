"""Run logging: ``metrics.jsonl`` (one object per step), trackers, sample dumps and the reward-curve PNG."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

METRICS_FILE = "metrics.jsonl"
EVAL_FILE = "eval.jsonl"


def to_python(value: Any) -> Any:
    """Tensors and numpy scalars -> floats; NaN/inf -> None so that the JSON stays standard."""
    if isinstance(value, torch.Tensor):
        value = value.detach().float().item() if value.numel() == 1 else value.detach().float().tolist()
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonlLog:
    """Append-only JSON-lines file that can be truncated back to a step (used on resume)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps({k: to_python(v) for k, v in record.items()}) + "\n")

    def truncate_after(self, step: int) -> None:
        """Drop records with ``step > step`` (written by a run that died after its last checkpoint), and a last line
        torn by a kill while it was being written."""
        if not self.path.exists():
            return
        kept = [json.dumps(record) for record in self.read() if record["step"] <= step]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        tmp.replace(self.path)

    def read(self) -> list[dict[str, Any]]:
        """The records; a torn last line (a kill while appending) is ignored, a damaged earlier line is an error."""
        if not self.path.exists():
            return []
        lines = [line for line in self.path.read_text().splitlines() if line]
        records = []
        for number, line in enumerate(lines, start=1):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                if number == len(lines):
                    break
                raise ValueError(
                    f"{self.path}, line {number}: not a JSON record ({err}); remove or repair it"
                ) from None
        return records


def dump_samples(
    directory: Path, step: int, prompts: list[str], outputs: list[Any], rewards: list[float], k: int
) -> None:
    """Write the first ``k`` samples of a step: text to ``samples/step-N.jsonl``, images to PNG files beside it."""
    directory.mkdir(parents=True, exist_ok=True)
    records = []
    for i, (prompt, output, reward) in enumerate(zip(prompts[:k], outputs[:k], rewards[:k])):
        record: dict[str, Any] = {"step": step, "index": i, "prompt": prompt, "reward": to_python(reward)}
        if isinstance(output, str):
            record["output"] = output
        elif hasattr(output, "save"):  # PIL image
            name = f"step-{step}-{i}.png"
            output.save(directory / name)
            record["output"] = name
        else:
            record["output"] = repr(type(output))
        records.append(record)
    (directory / f"step-{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def plot_curves(metrics: list[dict[str, Any]], evals: list[dict[str, Any]], path: Path) -> None:
    """Reward (train, per step) and held-out accuracy (per evaluation) against step, in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [m["step"] for m in metrics if m.get("reward/mean") is not None]
    ax.plot(steps, [m["reward/mean"] for m in metrics if m.get("reward/mean") is not None], label="train reward (mean)")
    if evals:
        ax.plot([e["step"] for e in evals], [e.get("eval/accuracy") for e in evals], "o-", label="held-out accuracy")
    ax.set_xlabel("step")
    ax.set_ylabel("reward / accuracy")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def step_record(step, rollout, reward_table, reward_errors, labels, stats, update_metrics) -> dict[str, Any]:
    """One line of ``metrics.jsonl``: rewards per label, the advantage stage's statistics, the update's metrics and
    the rollout's numeric info (``rollout/<key>``)."""
    mask = rollout.action_mask
    lengths = mask.sum(1)
    record: dict[str, Any] = {
        "step": step,
        "reward/mean": stats["reward/mean"],
        "reward/std": stats["reward/std"],
        "num_samples": len(rollout),
        "completion_length/mean": float(lengths.mean()),
        "frac_reward_zero_std": stats["frac_reward_zero_std"],
    }
    for k, label in enumerate(labels):
        record[f"reward/{label}/mean"] = float(reward_table[:, k].nanmean())
        record[f"reward/{label}/errors"] = float(reward_errors[k])
        record[f"reward/{label}/missing"] = float(reward_table[:, k].isnan().sum())
    for key, value in stats.items():  # the combiner names rewards by column: reward_<k>/... -> reward/<label>/...
        prefix, _, rest = key.partition("/")
        if prefix.startswith("reward_") and prefix[7:].isdigit() and rest:
            key = f"reward/{labels[int(prefix[7:])]}/{rest}"
        record.setdefault(key, value)
    record |= update_metrics
    record.setdefault("kl", 0.0)
    record.setdefault("entropy", float("nan"))
    for key, value in rollout.info.items():
        if isinstance(value, (int, float)):
            record[f"rollout/{key}"] = value
    return record


def progress_bar(run, start_step: int, main: bool):
    """A tqdm bar on the main process when ``run.progress_bar`` (else None: :func:`report_progress` prints)."""
    if not (run.progress_bar and main):
        return None
    from tqdm.auto import tqdm

    return tqdm(total=run.max_steps, initial=start_step, desc="genalign", dynamic_ncols=True)


def report_progress(progress, record: dict[str, Any], step: int, log_every: int) -> None:
    fmt = {
        "reward": record["reward/mean"],
        "kl": record.get("kl", 0.0),
        "step_s": record["time/step_s"],
    }
    text = " ".join(f"{k}={v:.3g}" for k, v in fmt.items() if v is not None and not math.isnan(v))
    if progress is not None:
        progress.update(1)
        progress.set_postfix_str(text)
    elif step % log_every == 0:
        print(f"step {step}: {text}", flush=True)
