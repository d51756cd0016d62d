"""Run-directory discipline: a new run never writes into an earlier run's folder, and a resume continues only the run
that wrote the checkpoint.

* Starting without ``run.resume`` in a ``run.output_dir`` that holds a previous run (metrics, evaluations, checkpoints
  or a config) is an error naming the folder and the two choices: ``run.resume=latest``, or a new ``run.output_dir``
  (or ``run.overwrite=true``, which moves the old run aside to ``<dir>.old-<time>``; nothing is ever deleted).
* The run's leftovers (temporary checkpoint folders of dead writers, half-rewritten logs) are removed before anything
  is written (:func:`remove_leftovers`); the lock that makes one trainer the only writer is
  :mod:`genalign.trainer.run_lock`.
* A resume compares the config saved with the checkpoint against the current one on the fields that change the
  meaning of the saved state (:data:`STATE_DEFINING_FIELDS`) and names the first that differs; ``run.resume_changes``
  lists the fields a user changes deliberately.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from genalign.config.bounds import RUN_MARKERS, holds_a_run
from genalign.config.paths import same_setting
from genalign.data.sources import PYTHON_PREFIX
from genalign.errors import UserError

#: config fields whose change makes a checkpoint's state mean something else (weights of another model or adapter,
#: groups of another size, another data order); ``<option>.name``: the option's name, whatever its hyper-parameters
STATE_DEFINING_FIELDS = (
    "policy.family",
    "policy.model",
    "policy.lora",
    "policy.lora_scope",
    "policy.likelihood_proxy.name",
    "policy.likelihood_free.method",
    "algorithm.group_size",
    "algorithm.prompts_per_step",
    "algorithm.advantage.name",
    "data.train",
    "run.seed",
)


class RunDirectoryError(UserError, RuntimeError):
    """The output folder holds another run, or the checkpoint belongs to a different run; the message says what to
    do."""


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


def remove_leftovers(output_dir: Path) -> list[Path]:
    """Remove what an interrupted process of this run left behind: temporary checkpoint folders (not those of a live
    writer) and half-rewritten logs. Called first thing after the run's lock is taken, before anything is written, so
    that a resume after a full disk is not stopped by its own leftovers. Returns what was removed."""
    from genalign.trainer.checkpoint import remove_temporary
    from genalign.trainer.metrics import EVAL_FILE, METRICS_FILE

    removed = remove_temporary(output_dir)
    for log in (METRICS_FILE, EVAL_FILE):  # JsonlLog.truncate_after writes <name>.tmp, then renames it
        temporary = output_dir / Path(log).with_suffix(".tmp").name
        if temporary.is_file() or temporary.is_symlink():
            temporary.unlink()
            removed.append(temporary)
    return removed


def _field(config: dict[str, Any], path: str) -> Any:
    value: Any = config
    for part in path.split("."):
        if isinstance(value, str) and part == "name":  # an option written as its bare name
            return value
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
        if not same_setting(before, now):
            _refuse_other_python_rows(path, before, now)
            raise RunDirectoryError(
                f"the checkpoint was written with {path} = {before!r}, this run has {path} = {now!r}: the saved state "
                f"belongs to another setup. Resume with the original value, start a new run.output_dir, or, if the "
                f"change is deliberate, add it to run.resume_changes (e.g. run.resume_changes=[{path}])."
            )


def _refuse_other_python_rows(path: str, before: Any, now: Any) -> None:
    """The resume error for rows passed from Python that differ from the run's (their recorded fingerprints)."""
    sources = [value.get("source") if isinstance(value, dict) else None for value in (before, now)]
    if not any(isinstance(source, str) and source.startswith(PYTHON_PREFIX) for source in sources):
        return
    argument = f"{path.rsplit('.', 1)[-1]}_dataset"
    raise RunDirectoryError(
        f"the run was started with other {path} rows than this resume gets ({path}.source was {sources[0]!r}, now "
        f"{sources[1]!r}; rows passed from Python are recorded by their count and SHA-256). A resumed run must get "
        f"the same rows in the same order: pass the same {argument}, start a new run.output_dir, or, to continue on "
        f"other rows deliberately, add run.resume_changes=[{path}]."
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
    "remove_leftovers",
]
