"""Reliability tests train the tabular toy policy in-process (tests/trainer/toy_policy.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from genalign.policies import family_names, register_family
from tests.trainer import toy_policy


@pytest.fixture(scope="session", autouse=True)
def toy_family():
    if "toy" not in family_names():
        register_family("toy", config_class=toy_policy.ToyPolicyConfig, build_policy=toy_policy.build_policy)


def toy_config(tmp_path: Path, **sections: dict[str, Any]) -> TrainConfig:
    """A 6-step toy run writing to ``tmp_path / 'run'``; ``sections`` update the config's sections."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in toy_policy.toy_rows(8)))
    config: dict[str, Any] = {
        "policy": {"family": "toy", "num_prompts": 8, "layout_free_sampling": True},
        "data": {"train": {"source": str(data)}},
        "rewards": [{"fn": "toy_letter_match", "name": "match"}],
        "algorithm": {"group_size": 4, "prompts_per_step": 4, "micro_batch_size": 4},
        "optim": {"lr": 0.5, "max_grad_norm": None},
        "eval": {"at_start": False},
        "run": {"output_dir": str(tmp_path / "run"), "max_steps": 6, "save_every": 2, "progress_bar": False,
                "log_every": 100},
    }  # fmt: skip
    for section, values in sections.items():
        config[section] = {**config.get(section, {}), **values}
    return from_dict(TrainConfig, config)


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
