"""Typed, strict configs from YAML with ``key=value`` overrides (see :mod:`genalign.config.core`)."""

from __future__ import annotations

from pathlib import Path

from genalign.config.core import ConfigError, apply_overrides, from_dict, load_yaml, to_dict
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
    """Read ``path``, apply ``key=value`` overrides, and return the validated :class:`TrainConfig`."""
    data = apply_overrides(load_yaml(path), list(overrides))
    for reward in data.get("rewards") or []:  # reward files are relative to the config file
        fn = reward.get("fn") if isinstance(reward, dict) else None
        if isinstance(fn, str) and ".py:" in fn and not Path(fn.rsplit(":", 1)[0]).expanduser().is_absolute():
            reward["fn"] = str(Path(path).resolve().parent / fn)
    return from_dict(TrainConfig, data)


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
    "load_config",
    "to_dict",
]
