"""Rewards of one's own: named by import path or file path in YAML and on the CLI, checked at load like built-in ones,
recorded so that saved configs work again; from Python, passed as callables."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from genalign.config import ConfigError, load_config, to_dict
from genalign.rewards import reward_factory
from tests import prepared_python

ROOT = Path(__file__).resolve().parents[2]
REWARD_FILE = """
def digit_reward(prompts, completions, *, digit: str = "7", **columns):
    return [float(digit in c) for c in completions]


class LengthReward:
    def __init__(self, *, target: int = 3):
        self.target = target

    def __call__(self, prompts, completions, **columns):
        return [-abs(len(c) - self.target) for c in completions]
"""


def write_config(folder: Path, fn: str, args: dict | None = None) -> Path:
    config = {
        "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_new_tokens": 4},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "digits": 1}}},
        "rewards": [{"fn": fn, "args": args or {}}],
        "algorithm": {"group_size": 2, "prompts_per_step": 2, "micro_batch_size": 4},
        "eval": {"at_start": False},
        "run": {"output_dir": str(folder / "run"), "max_steps": 1, "progress_bar": False},
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture()
def reward_module(tmp_path):
    (tmp_path / "rewards_dir").mkdir()
    (tmp_path / "rewards_dir" / "my_rewards.py").write_text(REWARD_FILE)
    return tmp_path / "rewards_dir"


def test_a_file_path_relative_to_the_config_is_recorded_absolutely(tmp_path, reward_module):
    config = load_config(write_config(reward_module, "my_rewards.py:digit_reward", {"digit": "3"}))
    assert config.rewards[0].fn == f"{reward_module / 'my_rewards.py'}:digit_reward"
    assert reward_factory(config.rewards[0].fn)(digit="3")(["p"], ["13"]) == [1.0]
    saved = tmp_path / "saved.yaml"  # the run's saved config, used from elsewhere later
    saved.write_text(yaml.safe_dump(to_dict(config)))
    assert load_config(saved).rewards[0].fn == config.rewards[0].fn


def test_module_paths_in_both_spellings_and_classes(tmp_path, reward_module, monkeypatch):
    monkeypatch.syspath_prepend(str(reward_module))
    for fn in ("my_rewards:digit_reward", "my_rewards.digit_reward"):
        assert load_config(write_config(tmp_path, fn)).rewards[0].fn == fn
    config = load_config(write_config(tmp_path, "my_rewards:LengthReward", {"target": 2}))
    assert reward_factory(config.rewards[0].fn)(target=2)(["p"], ["abcd"]) == [-2]


@pytest.mark.parametrize(
    ("fn", "args", "message"),
    [
        ("missing.py:digit_reward", {}, r"rewards\[0\]\.fn: reward '.*missing\.py:digit_reward': .* does not exist"),
        ("my_rewards.py:nothing", {}, r"rewards\[0\]\.fn: reward .* has no callable 'nothing'"),
        ("no_such_module:fn", {}, r"rewards\[0\]\.fn: reward 'no_such_module:fn': cannot import module"),
        ("exact_matc", {}, r"rewards\[0\]\.fn: unknown reward function 'exact_matc'. Did you mean 'exact_match'"),
        ("my_rewards.py:digit_reward", {"digits": "1"}, r"rewards\[0\]\.args\.digits: .* Did you mean 'digit'"),
    ],
)
def test_bad_reward_names_and_args_are_caught_at_load(reward_module, fn, args, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write_config(reward_module, fn, args))


def test_the_cli_trains_with_a_file_reward_and_validates_the_saved_config(tmp_path, reward_module, monkeypatch):
    """Training through the CLI's entry point in this process (from another folder); the saved config is validated in
    a fresh process, which has never loaded the reward file."""
    from genalign.cli import main

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    path = write_config(reward_module, "my_rewards.py:digit_reward")
    monkeypatch.chdir(tmp_path)
    assert main(["train", str(path)]) == 0
    saved = reward_module / "run" / "config.yaml"
    check = prepared_python.run([sys.executable, "-m", "genalign.cli", "validate", str(saved)], env=env, cwd=ROOT,
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, check.stderr[-2000:]


def test_python_callables_are_accepted_and_written_as_import_paths(tmp_path):
    from genalign.config import from_dict
    from genalign.config.schema import TrainConfig
    from genalign.rewards.text import exact_match

    raw = yaml.safe_load(write_config(tmp_path, "exact_match").read_text())
    raw["rewards"] = [{"fn": exact_match}, {"fn": lambda prompts, completions, **c: [0.0] * len(completions)}]
    config = from_dict(TrainConfig, raw)
    assert [r.label for r in config.rewards] == ["exact_match", "<lambda>"]
    saved = to_dict(config)["rewards"]
    assert saved[0]["fn"] == "genalign.rewards.text:exact_match" and saved[1]["fn"].startswith("<unsaved callable")
    with pytest.raises(ValueError, match="cannot be loaded again from a saved config"):
        reward_factory(saved[1]["fn"])


def count_sevens(prompts, completions, **columns):
    return [float(c.count("7")) for c in completions]


def test_train_takes_reward_callables_directly(tmp_path):
    import json

    from genalign.trainer import train

    train(load_config(write_config(tmp_path, "exact_match")), rewards=[count_sevens])
    record = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert "reward/count_sevens/mean" in record
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["rewards"][0]["fn"].endswith(":count_sevens")
