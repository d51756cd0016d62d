"""Run-directory discipline: a new run never writes into an earlier run's folder, and a resume continues only the run
that wrote the checkpoint.

* Starting without ``run.resume`` in a ``run.output_dir`` that holds a previous run (metrics, evaluations, checkpoints
  or a config) is an error naming the folder and the two choices: ``run.resume=latest``, or a new ``run.output_dir``
  (or ``run.overwrite=true``, which moves the old run aside to ``<dir>.old-<time>``; nothing is ever deleted).
* A resume compares the config saved with the checkpoint against the current one on the fields that change the
  meaning of the saved state (:data:`STATE_DEFINING_FIELDS`) and names the first that differs; ``run.resume_changes``
  lists the fields a user changes deliberately.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from genalign.errors import UserError

#: files and folders that mark a folder as holding a run
RUN_MARKERS = ("metrics.jsonl", "eval.jsonl", "config.yaml", "checkpoints")

#: config fields whose change makes a checkpoint's state mean something else (weights of another model or adapter,
#: groups of another size, another data order)
STATE_DEFINING_FIELDS = (
    "policy.family",
    "policy.model",
    "policy.lora",
    "policy.lora_rank",
    "policy.lora_alpha",
    "policy.lora_target_modules",
    "policy.lora_scope",
    "policy.likelihood_proxy",
    "policy.likelihood_free.method",
    "algorithm.group_size",
    "algorithm.prompts_per_step",
    "algorithm.advantage",
    "data.train",
    "run.seed",
)


class RunDirectoryError(UserError, RuntimeError):
    """The output folder holds another run, or the checkpoint belongs to a different run; the message says what to
    do."""


def holds_a_run(output_dir: Path) -> bool:
    return output_dir.is_dir() and any((output_dir / marker).exists() for marker in RUN_MARKERS)


def claim_output_dir(output_dir: Path, *, resume: str | None, overwrite: bool) -> Path | None:
    """Check that a new run may write into ``output_dir``; with ``overwrite`` move a previous run aside and return
    where it went. Call before anything is written."""
    if resume is not None or not holds_a_run(output_dir):
        return None
    if not overwrite:
        found = ", ".join(marker for marker in RUN_MARKERS if (output_dir / marker).exists())
        raise RunDirectoryError(
            f"run.output_dir={str(output_dir)!r} holds a previous run ({found}). Continue it with run.resume=latest, "
            "or start a new run with another run.output_dir (or run.overwrite=true, which moves the previous run "
            "aside to a '.old-<time>' folder next to it)."
        )
    aside = output_dir.with_name(f"{output_dir.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
    output_dir.rename(aside)
    return aside


def _field(config: dict[str, Any], path: str) -> Any:
    value: Any = config
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def check_resume_compatible(saved: dict[str, Any] | None, current: dict[str, Any], *, allowed: list[str]) -> None:
    """Raise :class:`RunDirectoryError` naming the first state-defining field whose value differs between the config
    saved with the checkpoint and the current one (unless listed in ``allowed``)."""
    if saved is None:  # checkpoints of older versions carry no config
        return
    for path in STATE_DEFINING_FIELDS:
        if path in allowed or any(path.startswith(a + ".") for a in allowed):
            continue
        before, now = _field(saved, path), _field(current, path)
        if before != now:
            raise RunDirectoryError(
                f"the checkpoint was written with {path} = {before!r}, this run has {path} = {now!r}: the saved state "
                f"belongs to another setup. Resume with the original value, start a new run.output_dir, or, if the "
                f"change is deliberate, add it to run.resume_changes (e.g. run.resume_changes=[{path}])."
            )


def check_steps_left(step: int, max_steps: int) -> None:
    if step >= max_steps:
        raise RunDirectoryError(
            f"the checkpoint is at step {step} and run.max_steps = {max_steps}: there is nothing left to train. "
            f"Raise run.max_steps (e.g. run.max_steps={step + max(step // 2, 1)}) to continue the run."
        )


__all__ = [
    "RunDirectoryError",
    "check_resume_compatible",
    "check_steps_left",
    "claim_output_dir",
    "holds_a_run",
]
