"""Bounds checked when a config loads, before anything is read, allocated or written: the output folder, seeds, and
sanity bounds on the sizes of a step.

The size bounds are not a memory plan: running the planner (``genalign plan``, which builds the model on the meta
device and traces its passes) at every config load would cost seconds and needs the model's files. They only refuse
sizes no training step can hold (``algorithm.group_size=100000000``, ``policy.max_new_tokens=10000000``) before the
first tensor is allocated, and point at ``genalign plan`` for what a step of the config really needs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from genalign.config.core import ConfigError

#: seeds are 32-bit: numpy takes no more, and a step's seed is reduced to 31 bits anyway
MAX_SEED = 2**32 - 1
#: rollout samples per training step (all processes); the largest published recipes use ~16k
MAX_SAMPLES_PER_STEP = 2**20
#: prompt plus completion tokens of one sample; the longest RL completions published are ~128k
MAX_SAMPLE_TOKENS = 2**20
PLAN_HINT = "run `genalign plan CONFIG --gpus N --gpu-memory GB` to see what a step of the config needs"


def check_seed(field: str, value: int) -> None:
    """``value`` of the seed field ``field`` is in ``[0, 2**32 - 1]``."""
    if not 0 <= value <= MAX_SEED:
        raise ConfigError(
            f"{field} = {value} is out of range; use an integer in [0, {MAX_SEED}] (2**32 - 1, the largest seed every "
            "random generator genalign seeds accepts)."
        )


def check_output_dir(value: str, *, overwrite: bool) -> None:
    """``run.output_dir`` names a folder of the run's own: not empty, not an existing file, not the filesystem root,
    and not the current folder (or one above it) unless that folder is empty or holds a previous run to resume."""
    if not value.strip():
        raise ConfigError(
            f"run.output_dir = {value!r} is empty, which would write the run's metrics and checkpoints into the current "
            "folder; give a folder of its own, e.g. run.output_dir=runs/my-run."
        )
    if value != value.strip():
        raise ConfigError(
            f"run.output_dir = {value!r} starts or ends with whitespace, which would become part of the folder name; "
            f"remove it (run.output_dir={value.strip()})."
        )
    path = Path(value)
    resolved = path.resolve()
    if resolved == Path(resolved.anchor):
        raise ConfigError(
            f"run.output_dir = {value!r} is the filesystem root ({resolved}); give a folder of its own, e.g. "
            "run.output_dir=runs/my-run."
        )
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"run.output_dir = {value!r} is an existing file, not a folder; give a folder of its own, e.g. "
            "run.output_dir=runs/my-run."
        )
    cwd = Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        _check_current_folder(value, resolved, overwrite=overwrite)


#: files and folders that mark a folder as holding a run
RUN_MARKERS = ("metrics.jsonl", "eval.jsonl", "config.yaml", "checkpoints")


def holds_a_run(output_dir: Path) -> bool:
    """The folder holds (part of) a training run."""
    return output_dir.is_dir() and any((output_dir / marker).exists() for marker in RUN_MARKERS)


def _check_current_folder(value: str, resolved: Path, *, overwrite: bool) -> None:
    entries = sorted(os.listdir(resolved))
    if not entries or (holds_a_run(resolved) and not overwrite and resolved == Path.cwd().resolve()):
        return
    shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
    what = "the current folder" if resolved == Path.cwd().resolve() else "a folder above the current one"
    raise ConfigError(
        f"run.output_dir = {value!r} is {what} ({resolved}), which holds other things ({shown}); a run writes "
        "metrics, samples and checkpoints into its output folder (and run.overwrite moves the whole folder aside): "
        "give a folder of its own, e.g. run.output_dir=runs/my-run."
    )


def check_sizes(config: Any) -> None:
    """Samples per step and tokens per sample within the sanity bounds (:data:`MAX_SAMPLES_PER_STEP`,
    :data:`MAX_SAMPLE_TOKENS`)."""
    algorithm = config.algorithm
    prompts, group = algorithm.prompts_to_sample(), algorithm.group_size
    if prompts * group > MAX_SAMPLES_PER_STEP:
        sampled = "prompts sampled per step" if prompts != algorithm.prompts_per_step else "algorithm.prompts_per_step"
        raise ConfigError(
            f"algorithm.group_size × {sampled} = {group} × {prompts} = {group * prompts} samples per step, beyond the "
            f"sanity bound of {MAX_SAMPLES_PER_STEP} (2**20; the largest published recipes use ~16k), refused before "
            f"anything is allocated. Lower algorithm.group_size or algorithm.prompts_per_step; {PLAN_HINT}."
        )
    completion = getattr(config.policy, "max_new_tokens", None)
    prompt = getattr(config.policy, "max_prompt_tokens", None) or 0
    if isinstance(completion, int) and completion + prompt > MAX_SAMPLE_TOKENS:
        raise ConfigError(
            f"policy.max_prompt_tokens + policy.max_new_tokens = {prompt} + {completion} = {prompt + completion} tokens "
            f"per sample, beyond the sanity bound of {MAX_SAMPLE_TOKENS} (2**20; the longest published RL completions "
            f"are ~128k), refused before anything is allocated. Lower them; {PLAN_HINT}."
        )


__all__ = ["MAX_SAMPLES_PER_STEP", "MAX_SAMPLE_TOKENS", "MAX_SEED", "check_output_dir", "check_seed", "check_sizes"]
