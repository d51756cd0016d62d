"""The training config schema: option names and hyper-parameters checked at load time, with the fix in the message."""

from __future__ import annotations

import os

import pytest
import yaml

from genalign.cli import main
from genalign.config import ConfigError, load_config
from genalign.registry import Option

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BASE = {
    "policy": {"family": "causal_lm", "model": "some/model"},
    "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 10}}},
    "rewards": [{"fn": "exact_match"}],
}


def load(tmp_path, *overrides):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE))
    return load_config(path, list(overrides))


def test_minimal_config_fills_defaults(tmp_path):
    cfg = load(tmp_path)
    assert (
        cfg.algorithm.advantage == Option("grpo") and cfg.algorithm.fully_on_policy and cfg.policy.family == "causal_lm"
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algorithm.advantage=grp", "unknown advantage estimator 'grp'. Did you mean 'grpo'"),
        ("algorithm.advantage.epz=1", "algorithm.advantage: advantage estimator 'grpo' got unknown hyper-parameter"),
        ("algorithm.aggregation=token-mean", "Did you mean 'token_mean'"),
        ("algorithm.clip=ppo2", "algorithm.clip: unknown clip form 'ppo2'. Did you mean 'ppo'"),
        ("algorithm.clip.eps=0.2", "algorithm.clip: clip form 'ppo' got unknown hyper-parameter(s) 'eps'"),
        ("algorithm.objective.eps_high=0.2", "'eps_high' is a keyword of clip form 'ppo'"),
        ("algorithm.ratio_level.eps_high=0.2", "algorithm.ratio_level: ratio level 'token' got unknown"),
        ("algorithm.group_size=1", "algorithm.advantage 'grpo' compares the samples of a group and needs at least 2"),
        ("algorithm.kl_estimator=k4", "'k4' is not valid; use one of 'k1', 'k2', 'k3'"),
        ("policy.family=causal", "unknown policy family 'causal'. Did you mean 'causal_lm'"),
        ("policy.temperatur=1.0", "Did you mean 'temperature'"),
        ("rewards.0.fn=exact_mach", "Did you mean 'exact_match'"),
        ("optim.lr=0", "optim.lr = 0.0 must be > 0"),
        ("run.trackers=[mlflow]", "'mlflow' is not supported"),
        ("data.train={source: data.txt}", "unsupported file type '.txt'"),
        ("eval.accuracy_reward=acc", "is not a reward label"),
        ("eval.seed=-1", "eval.seed = -1 must be >= 0"),
        ("eval.batch_size=0", "eval.batch_size = 0 must be >= 1"),
        ("algorith.group_size=4", "unknown config key 'algorith'. Did you mean 'algorithm'"),
    ],
)
def test_invalid_fields_name_field_value_and_fix(tmp_path, override, message):
    with pytest.raises(ConfigError) as err:
        load(tmp_path, override)
    assert message in str(err.value)


def test_yaml_style_exponents_are_numbers(tmp_path):
    assert load(tmp_path, "optim.lr=3e-6").optim.lr == 3e-6


def test_cli_validate_reports_errors_with_exit_code_2(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert main(["validate", str(path), "algorithm.advantage=nope"]) == 2
    assert "invalid config" in capsys.readouterr().err
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 2


@pytest.mark.parametrize("name", ["low_probability", "distribution_entropy"])
def test_vocabulary_regularisers_load_for_token_policies_only(tmp_path, name):
    assert load(tmp_path, f"algorithm.regularizer={name}").algorithm.regularizer == Option(name)
    path = tmp_path / "flow.yaml"
    path.write_text(yaml.safe_dump({**BASE, "policy": {"family": "flow", "model": "some/pipeline"}}))
    with pytest.raises(ConfigError) as err:
        load_config(path, [f"algorithm.regularizer={name}"])
    message = str(err.value)
    assert f"algorithm.regularizer = {name!r}" in message and "policy.family = 'flow'" in message
    assert "Families whose default options supply 'vocab_term': causal_lm, vlm" in message


def test_vocabulary_regulariser_values_are_checked_at_load(tmp_path):
    with pytest.raises(ConfigError, match=r"algorithm.regularizer: noise_ratio must be in \[0, 1\), got 1.5"):
        load(tmp_path, "algorithm.regularizer={name: low_probability, noise_ratio: 1.5}")
