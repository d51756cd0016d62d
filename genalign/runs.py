"""Which checkpoint a command means, and the policy with that checkpoint's weights: shared by ``genalign sample``,
``genalign eval`` and ``genalign export``.

A command names a checkpoint as a run folder (its newest verified checkpoint), a checkpoint folder
(``run/checkpoints/step-N``), ``latest`` (the newest of ``run.output_dir``) or ``none`` (the base model). Every
checkpoint is verified against its manifest (sizes and SHA-256 of every file) exactly as a resume does: a damaged
checkpoint folder is refused with a message naming the file, and a run's damaged newest checkpoint is skipped for the
one before it, saying why (on stderr). The weights are restored with
:func:`genalign.trainer.checkpoint.load_policy_weights`, so every checkpoint layout the trainer writes (one process,
or sharded) loads here in one process.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from genalign.config import TrainConfig, load_config_without_rewards

if TYPE_CHECKING:
    from genalign.policies.base import Policy

#: the run config the trainer writes into a run folder and into every checkpoint
CONFIG_FILE = "config.yaml"


def resolve_checkpoint(value: str | None, *, output_dir: str | Path) -> str | None:
    """``None``/'latest': the newest verified checkpoint of ``output_dir`` (the run's ``run.output_dir``; None when it
    has none); a run folder: its newest; 'none': the base model; anything else: a checkpoint folder.

    Raises:
        FileNotFoundError: 'latest' without a checkpoint, or a folder that is neither a checkpoint nor a run.
        genalign.trainer.checkpoint.CheckpointError: a checkpoint folder that fails verification, or a run whose
            checkpoints all fail it (the message names the file).
    """
    from genalign.trainer.checkpoint import COMPLETE, list_checkpoints

    if value == "none":
        return None
    if value in (None, "latest"):
        run_dir = Path(output_dir)
        if not list_checkpoints(run_dir):
            if value == "latest":
                raise FileNotFoundError(f"--checkpoint latest: {run_dir} holds no checkpoint; train first or give one.")
            return None
        return _verified(run_dir, "latest")
    path = Path(value)
    if (path / "checkpoints").is_dir():  # a run folder
        return _verified(path, "latest")
    if not (path / COMPLETE).exists():
        raise FileNotFoundError(f"--checkpoint {value}: not a checkpoint folder (no COMPLETE marker) nor a run folder.")
    return _verified(path.parent.parent, value)


def _verified(output_dir: Path, value: str) -> str:
    """The checkpoint that a resume with ``run.resume=value`` would take; skipped ones are reported on stderr."""
    import sys

    from genalign.trainer.checkpoint import find_checkpoint

    found = find_checkpoint(output_dir, value, argument="--checkpoint")
    for path, reason in found.skipped:
        print(f"genalign: skipped {path} ({reason}); using {found.path.name}", file=sys.stderr)
    return str(found.path)


def open_run_or_checkpoint(value: str, *, argument: str) -> tuple[TrainConfig, Path]:
    """The config and the checkpoint folder of ``value``, a run folder (its newest verified checkpoint) or a
    checkpoint folder; the config is the one saved with the checkpoint (the run's for checkpoints of older versions),
    read without loading its rewards (they may be functions of the script that trained, or files not here).

    Raises:
        FileNotFoundError: ``value`` is not a run or checkpoint folder, or the run has no checkpoint yet; the message
            names ``argument``, the value and what to give instead.
    """
    from genalign.trainer.checkpoint import COMPLETE, list_checkpoints

    path = Path(value)
    if not path.is_dir():
        raise FileNotFoundError(f"{argument} {value}: no such folder; give a run folder or a checkpoint folder.")
    is_run = (path / "checkpoints").is_dir() or ((path / CONFIG_FILE).is_file() and not (path / COMPLETE).exists())
    if is_run and not list_checkpoints(path):
        raise FileNotFoundError(
            f"{argument} {value}: this run has no complete checkpoint yet; wait for the first one (run.save_every) or "
            "for the end of training, or give a checkpoint folder."
        )
    if not is_run and not (path / COMPLETE).exists():
        raise FileNotFoundError(
            f"{argument} {value}: neither a run folder (with checkpoints/) nor a checkpoint folder (with a COMPLETE "
            "marker); give OUTPUT_DIR or OUTPUT_DIR/checkpoints/step-N of a training run."
        )
    run_file = path / CONFIG_FILE if is_run else path.parent.parent / CONFIG_FILE
    checkpoint = Path(str(resolve_checkpoint(value, output_dir=path)))
    config_file = checkpoint / CONFIG_FILE if (checkpoint / CONFIG_FILE).is_file() else run_file
    if not config_file.is_file():
        raise FileNotFoundError(f"{argument} {value}: no {CONFIG_FILE} in {checkpoint} nor in its run folder.")
    return load_config_without_rewards(config_file), checkpoint


def load_policy(config: TrainConfig, checkpoint: str | Path | None, *, verified: bool = False) -> Policy:
    """The policy of ``config`` on the GPU (CPU with ``run.cpu`` or without a GPU), with ``checkpoint``'s weights
    and policy state (EMA, ...) when given, else the base model's. The checkpoint is verified against its manifest
    first, unless ``verified`` (it came from :func:`resolve_checkpoint`)."""
    import torch

    from genalign.trainer.recipe import build_policy

    use_cpu = config.run.cpu or not torch.cuda.is_available()
    policy = build_policy(config, torch.device("cpu") if use_cpu else torch.device("cuda"))
    if checkpoint:
        from genalign.trainer.checkpoint import load_policy_weights

        load_policy_weights(Path(checkpoint), policy, verified=verified)
    return policy
