"""An objective whose published form needs one aggregation mode declares it (registry meta ``aggregation``):
``algorithm.aggregation`` defaults to it, and an explicit contradicting choice is refused at load, naming the field,
the value, the objective and the fix. GVPO [139], DisCO [289], ConSPO [74] and Reg-GRPO [177] write one loss per
sample on every action, so only ``seq_mean_token_mean`` gives their published per-sample mean."""

from __future__ import annotations

import os

import pytest
import yaml

from genalign import algorithms as alg
from genalign.config import ConfigError, from_dict, load_config, to_dict
from genalign.config.schema import AlgorithmConfig, TrainConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BASE = {
    "policy": {"family": "causal_lm", "model": "some/model"},
    "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 10}}},
    "rewards": [{"fn": "exact_match"}],
    "algorithm": {"group_size": 4, "micro_batch_size": 8},
}
DECLARING = ["conspo", "disco", "gvpo", "reg_grpo"]
#: the preference objectives on group pairs (issue 29 item 2) declare it too (a pair's loss written on both samples)
DECLARING += ["cita", "constrained_dpo", "group_dpo", "mipo", "p3o", "ra_dpo", "tdpo", "trpa"]
#: and HAEPO's Plackett-Luce objective (issue 29 item 3: one loss per sample written on its actions)
DECLARING += ["plackett_luce"]
#: and the preference rows Sem-DPO [51] and TDPO with the exact forward KL [48]; T-REG [244] declares it too but
#: needs a teacher to load (its config is checked in tests/config/test_preference_options.py)
DECLARING += ["sem_dpo", "tdpo_exact"]
WITH_A_TEACHER = ["t_reg"]


def load(tmp_path, *overrides):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE))
    return load_config(path, list(overrides))


def test_the_group_objectives_declare_seq_mean_token_mean_and_every_declared_mode_is_registered():
    declared = {name: alg.OBJECTIVES.meta(name).get("aggregation") for name in alg.OBJECTIVES.names()}
    assert {name for name, mode in declared.items() if mode} == set(DECLARING + WITH_A_TEACHER)
    assert all(declared[name] == "seq_mean_token_mean" for name in DECLARING + WITH_A_TEACHER)
    assert all(mode in alg.AGGREGATIONS for mode in declared.values() if mode)


@pytest.mark.parametrize("name", DECLARING)
def test_the_default_follows_the_objective(tmp_path, name):
    assert load(tmp_path, f"algorithm.objective={name}").algorithm.aggregation.name == "seq_mean_token_mean"
    assert (
        load(tmp_path, f"algorithm.objective={name}", "algorithm.aggregation=null").algorithm.aggregation.name
        == "seq_mean_token_mean"
    )
    assert AlgorithmConfig(objective=name).aggregation.name == "seq_mean_token_mean"  # also when built in code


def test_objectives_that_declare_nothing_keep_token_mean_and_any_explicit_mode(tmp_path):
    assert load(tmp_path).algorithm.aggregation.name == "token_mean"
    assert AlgorithmConfig().aggregation.name == "token_mean"
    assert load(tmp_path, "algorithm.aggregation=seq_mean_token_sum").algorithm.aggregation.name == "seq_mean_token_sum"


@pytest.mark.parametrize("name", DECLARING)
def test_an_explicit_contradicting_mode_is_refused_with_the_reason_and_the_fix(tmp_path, name):
    assert load(tmp_path, f"algorithm.objective={name}", "algorithm.aggregation=seq_mean_token_mean")
    with pytest.raises(ConfigError) as err:
        load(tmp_path, f"algorithm.objective={name}", "algorithm.aggregation=token_mean")
    message = str(err.value)
    assert f"algorithm.aggregation = 'token_mean' contradicts algorithm.objective = {name!r}" in message
    assert "needs aggregation 'seq_mean_token_mean'" in message
    assert "Remove algorithm.aggregation" in message and "set it to 'seq_mean_token_mean'" in message


def test_the_saved_resolved_config_loads_again():
    cfg = from_dict(TrainConfig, {**BASE, "algorithm": {**BASE["algorithm"], "objective": "disco"}})
    again = from_dict(TrainConfig, to_dict(cfg))
    assert again.algorithm == cfg.algorithm and again.algorithm.aggregation.name == "seq_mean_token_mean"
