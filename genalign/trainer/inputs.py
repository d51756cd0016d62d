"""What ``genalign.train`` takes from Python besides the config, as TRL's ``GRPOTrainer`` does: the training and
evaluation rows (``train_dataset``, ``eval_dataset``) and the reward callables (``rewards``).

The config (a YAML path, a dict or a :class:`~genalign.config.TrainConfig`) may leave out what the call supplies; the
two are merged into one raw config that is validated once (:func:`prepare`), so an error still names the field, the
value and the fix. Rows passed here are recorded in the saved ``config.yaml`` by their fingerprint
(:mod:`genalign.data.in_memory`); reward callables by their import path (:func:`genalign.rewards.callable_reference`).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genalign.config import ConfigError, RewardSpec, TrainConfig, from_dict, read_config_data, to_dict
from genalign.data.in_memory import python_source, rows_from_python
from genalign.data.sources import PYTHON_PREFIX, DataSourceConfig

#: what ``genalign.train`` accepts as the config
ConfigLike = TrainConfig | dict[str, Any] | str | Path
#: one entry of ``rewards=``: a callable, a registered name or import path, a RewardSpec or its mapping
RewardLike = Callable[..., Any] | str | RewardSpec | dict[str, Any]


@dataclass
class SuppliedRows:
    """Rows passed from Python, already mapped and checked; None where the config's source is read instead."""

    train: list[dict[str, Any]] | None = None
    eval: list[dict[str, Any]] | None = None


def raw_config(config: ConfigLike) -> dict[str, Any]:
    """A raw config dict of ``config`` (a copy: the caller's objects are not changed); reward callables kept."""
    if isinstance(config, str | Path):
        return read_config_data(config)
    if isinstance(config, dict):
        return copy.deepcopy(config)
    if isinstance(config, TrainConfig):
        data = to_dict(config)
        for entry, spec in zip(data["rewards"], config.rewards, strict=True):
            entry["fn"] = spec.fn  # the callable itself, not its recorded name
        return data
    raise ConfigError(
        f"config: expected a TrainConfig, a dict or the path of a YAML file, got {type(config).__name__}."
    )


def _reward_entry(reward: RewardLike, index: int) -> dict[str, Any]:
    if isinstance(reward, RewardSpec):
        return {f.name: getattr(reward, f.name) for f in dataclasses.fields(reward)}
    if isinstance(reward, dict):
        return dict(reward)
    if isinstance(reward, str) or callable(reward):
        return {"fn": reward}
    raise ConfigError(
        f"rewards[{index}]: {reward!r:.60} is not a reward; give a callable fn(prompts, completions, **columns) -> "
        "list[float | None], a registered name (genalign list rewards), a RewardSpec or a mapping {fn, weight, ...}."
    )


def _supply_rows(data: dict[str, Any], key: str, rows_in: Any) -> list[dict[str, Any]]:
    """Read ``rows_in`` (the ``<key>_dataset`` argument) with the columns, shuffle and limit of ``data.<key>`` and
    record their fingerprint as that section's source."""
    argument = f"{key}_dataset"
    sections = data.setdefault("data", {})
    if not isinstance(sections, dict):
        raise ConfigError(f"data: expected a mapping, got {sections!r}.")
    section = dict(sections.get(key) or {})
    source = section.get("source") or ""
    if source and not (isinstance(source, str) and source.startswith(PYTHON_PREFIX)):
        raise ConfigError(
            f"data.{key}.source = {source!r} and {argument}= are both given; give one of them (remove "
            f"data.{key}.source to train on {argument}, or leave out {argument})."
        )
    placeholder = from_dict(DataSourceConfig, section | {"source": f"{PYTHON_PREFIX}pending"}, f"data.{key}")
    rows = rows_from_python(rows_in, placeholder, argument)
    sections[key] = section | {"source": python_source(rows)}
    return rows


def prepare(
    config: ConfigLike,
    *,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    rewards: Sequence[RewardLike] | None = None,
) -> tuple[TrainConfig, SuppliedRows]:
    """The validated config of ``config`` with what the call supplies, and the rows it supplies.

    Raises:
        ConfigError: an invalid config (validated once, with the rows and rewards in place), a data source given both
            in the config and as an argument, or a reward that is not one.
        DataError: a row without a usable ``prompt`` (named ``train_dataset, row N (0-based)``).
    """
    data = raw_config(config)
    supplied = SuppliedRows()
    if train_dataset is not None:
        supplied.train = _supply_rows(data, "train", train_dataset)
    if eval_dataset is not None:
        supplied.eval = _supply_rows(data, "eval", eval_dataset)
    if rewards is not None:
        if callable(rewards) or isinstance(rewards, str | RewardSpec | dict):
            raise ConfigError("rewards= takes a list of rewards, e.g. rewards=[my_reward]; got one reward.")
        data["rewards"] = [_reward_entry(reward, i) for i, reward in enumerate(rewards)]
    train_config = from_dict(TrainConfig, data)
    train_config.data.validate()  # also when the config has no data section (it names train_dataset)
    return train_config, supplied


__all__ = ["ConfigLike", "RewardLike", "SuppliedRows", "prepare", "raw_config"]
