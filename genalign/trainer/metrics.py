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
