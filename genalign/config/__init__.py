"""Typed, strict configs from YAML with ``key=value`` overrides (see :mod:`genalign.config.core`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from genalign.config.core import ConfigError, apply_overrides, from_dict, load_yaml, to_dict
from genalign.config.migrate import migrate_saved_config
from genalign.config.schema import (
    AlgorithmConfig,
    DataConfig,
    EvalConfig,
    OptimConfig,
    RewardSpec,
    RunConfig,
    TrainConfig,
)


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """Read ``path``, apply ``key=value`` overrides, and return the validated :class:`TrainConfig`.

    The ``config.yaml`` a run wrote (in its run folder or in one of its checkpoints) is read in the current form even
    when an older version wrote it (:func:`migrate_run_config`, in memory; the file is not changed); a note on
    stderr says so. Any other file with a key of the older form is refused with the new form."""
    data = load_yaml(path)
    if is_saved_run_config(path):
        moved = migrate_run_config(data)
        if moved:
            print(
                f"genalign: {path} was written by an older genalign version; read in the current option form "
                f"({'; '.join(moved)}).",
                file=sys.stderr,
            )
    data = apply_overrides(data, list(overrides), TrainConfig)
    for reward in data.get("rewards") or []:  # reward files are relative to the config file
        fn = reward.get("fn") if isinstance(reward, dict) else None
        if isinstance(fn, str) and ".py:" in fn and not Path(fn.rsplit(":", 1)[0]).expanduser().is_absolute():
            reward["fn"] = str(Path(path).resolve().parent / fn)
    return from_dict(TrainConfig, data)


def migrate_run_config(data: dict[str, Any]) -> list[str]:
    """Rewrite, in place, the raw config a run wrote (``config.yaml``) from the older option form (a name plus a
    separate ``*_args`` mapping) into the current one; returns the old keys it moved (see
    :mod:`genalign.config.migrate`). Only for configs genalign wrote, never for a user's YAML."""
    return migrate_saved_config(TrainConfig, data)


def is_saved_run_config(path: str | Path) -> bool:
    """``path`` is the ``config.yaml`` the trainer wrote into a run folder (next to ``metrics.jsonl`` or
    ``checkpoints/``) or into a checkpoint (next to its ``COMPLETE`` marker)."""
    path = Path(path)
    folder = path.parent
    return path.name == "config.yaml" and any(
        (folder / marker).exists() for marker in ("metrics.jsonl", "checkpoints", "COMPLETE")
    )


__all__ = [
    "AlgorithmConfig",
    "ConfigError",
    "DataConfig",
    "EvalConfig",
    "OptimConfig",
    "RewardSpec",
    "RunConfig",
    "TrainConfig",
    "apply_overrides",
    "from_dict",
    "is_saved_run_config",
    "load_config",
    "migrate_run_config",
    "to_dict",
]
