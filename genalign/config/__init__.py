"""Typed, strict configs from YAML with ``key=value`` overrides (see :mod:`genalign.config.core`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from genalign.config.core import ConfigError, apply_overrides, from_dict, load_yaml, to_dict
from genalign.config.migrate import migrate_saved_config
from genalign.config.paths import paths_from_config_file, place_saved_run
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
    stderr says so. Any other file with a key of the older form is refused with the new form. Paths (relative to the
    config file; an override's to the working directory): see :mod:`genalign.config.paths` (a saved run config's
    ``run.output_dir`` is the folder it is in)."""
    return from_dict(TrainConfig, read_config_data(path, overrides))


def read_config_data(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The raw config of the YAML file ``path`` with the overrides applied, before validation: a run's saved config
    migrated and placed in its run folder (:func:`genalign.config.paths.place_saved_run`); in any other file, every
    relative path read from the file's folder (:func:`genalign.config.paths.paths_from_config_file`), the overrides'
    from the working directory."""
    data = load_yaml(path)
    if is_saved_run_config(path):
        moved = migrate_run_config(data)
        if moved:
            print(
                f"genalign: {path} was written by an older genalign version; read in the current option form "
                f"({'; '.join(moved)}).",
                file=sys.stderr,
            )
        place_saved_run(data, path, in_checkpoint=(Path(path).parent / "COMPLETE").exists())
    else:  # a saved config's paths are absolute (older versions: as the launch folder saw them)
        paths_from_config_file(data, path, TrainConfig)
    return apply_overrides(data, list(overrides), TrainConfig)


def _not_loaded(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float | None]:
    """Stands in for every reward while a config is validated without loading them; never called."""
    raise AssertionError("a reward held aside (not loaded) was called")


def hold_rewards(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Replace, in place, the rewards of the raw config ``data`` by stand-ins of the same name and weight, so that it
    validates without importing or building them (``genalign sample`` without ``--score``, ``genalign export``);
    return the rewards as written, to load later if asked (:func:`genalign.config.schema.RewardSpec`)."""
    rewards = data.get("rewards")
    held = [dict(r) for r in rewards] if isinstance(rewards, list) and all(isinstance(r, dict) for r in rewards) else []
    if held:
        data["rewards"] = [
            {"fn": _not_loaded, "name": r.get("name") or str(r.get("fn") or f"rewards[{i}]"), "weight": r.get("weight", 1.0)}
            for i, r in enumerate(held)
        ]  # fmt: skip
    return held


def load_config_without_rewards(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """:func:`load_config` with the rewards held aside (:func:`hold_rewards`): for commands that never score."""
    data = read_config_data(path, overrides)
    hold_rewards(data)
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
    "hold_rewards",
    "is_saved_run_config",
    "load_config",
    "load_config_without_rewards",
    "migrate_run_config",
    "read_config_data",
    "to_dict",
]
