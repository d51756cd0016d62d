"""Run logging: ``metrics.jsonl`` (one object per step), sample dumps and progress reports (the dashboard PNG drawn
from these logs: :mod:`genalign.trainer.dashboard`).

Progress: on a terminal a tqdm bar; elsewhere (a log file, a pipe, a job scheduler) one plain line every few updates,
never tqdm's carriage-return redraws, which a log file keeps as one ever-growing line (:class:`Progress`).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import IO, Any

import torch

from genalign.video_files import is_video, write_video

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
    directory: Path,
    step: int,
    prompts: list[str],
    outputs: list[Any],
    rewards: list[float],
    k: int,
    *,
    fps: int | None = None,
) -> None:
    """Write the first ``k`` samples of a step: text to ``samples/step-N.jsonl``, images to PNG files beside it,
    videos (``[F, H, W, 3]`` uint8) at ``fps`` to MP4 files (GIF without an encoder: :mod:`genalign.video_files`)."""
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
        elif is_video(output):
            if fps is None:
                raise ValueError(
                    "a video sample needs its frames per second: the policy declares it as rollout.info['fps']"
                )
            record["output"] = write_video(output, directory / f"step-{step}-{i}", fps=fps).name
            record["fps"] = fps
        else:
            record["output"] = repr(type(output))
        records.append(record)
    (directory / f"step-{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def step_record(step, rollout, reward_table, reward_errors, labels, stats, update_metrics) -> dict[str, Any]:
    """One line of ``metrics.jsonl``: rewards per label, the advantage stage's statistics, the update's metrics and
    the rollout's numeric info and its counts (``rollout/<key>``)."""
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
    record["time/unix"] = time.time()  # wall clock at the end of the step (the run's wall time in `genalign report`)
    record.setdefault("kl", 0.0)
    record.setdefault("entropy", float("nan"))
    for key, value in [*rollout.info.items(), *rollout.counts.items()]:
        if isinstance(value, (int, float)):
            record[f"rollout/{key}"] = value
    return record


class Progress:
    """Progress through ``total`` units (steps, evaluation batches): a tqdm bar when ``stream`` is a terminal, else
    one line ``<desc> <n>/<total>: <text> (<seconds> s)`` every ``every`` units and at the last one.

    Args:
        leave: keep the finished bar on screen (training) or erase it (evaluation, inside the training bar).
    """

    def __init__(self, total: int, desc: str, *, initial: int = 0, every: int = 1, leave: bool = True,
                 stream: IO[str] | None = None) -> None:  # fmt: skip
        self.total, self.desc, self.n, self.every = total, desc, initial, max(1, every)
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.monotonic()
        self.bar = None
        if _is_terminal(self.stream):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True, leave=leave, file=self.stream)

    def update(self, n: int = 1, text: str = "") -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
            if text:
                self.bar.set_postfix_str(text)
        elif self.n % self.every == 0 or self.n >= self.total:
            elapsed = time.monotonic() - self.started
            line = f"{self.desc} {self.n}/{self.total}{': ' + text if text else ''} ({elapsed:.1f} s)"
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _is_terminal(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def progress_bar(run, start_step: int, main: bool) -> Progress | None:
    """A tqdm bar of the training steps on the main process when ``run.progress_bar`` and stderr is a terminal; else
    None, and :func:`report_progress` prints a line every ``run.log_every`` steps."""
    if not (run.progress_bar and main and _is_terminal(sys.stderr)):
        return None
    return Progress(run.max_steps, "genalign", initial=start_step)


def report_progress(progress: Progress | None, record: dict[str, Any], step: int, log_every: int) -> None:
    fmt = {
        "reward": record["reward/mean"],
        "kl": record.get("kl", 0.0),
        "step_s": record["time/step_s"],
    }
    text = " ".join(f"{k}={v:.3g}" for k, v in fmt.items() if v is not None and not math.isnan(v))
    if progress is not None:
        progress.update(1, text)
    elif step % log_every == 0:
        print(f"step {step}: {text}", flush=True)
