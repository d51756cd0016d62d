"""Options of older versions (a name plus a separate ``*_args`` mapping, ``genalign.config.migrate``): a config with an
old key is refused with the exact new form computed from it; the ``config.yaml`` a run wrote with an older version
is read in the new form (in memory), for ``eval`` / ``sample`` / ``export`` and for resuming."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from genalign.config import ConfigError, from_dict, load_config, to_dict
from genalign.config.migrate import replaced_keys
from genalign.config.schema import AlgorithmConfig, TrainConfig
from genalign.policies.dlm.config import DiffusionLMPolicyConfig
from genalign.registry import Option
from genalign.trainer.checkpoint import checkpoint_config
from genalign.trainer.run_directory import RunDirectoryError, check_resume_compatible

os.environ.setdefault("HF_HUB_OFFLINE", "1")

LM: dict[str, Any] = {
    "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_new_tokens": 4},
    "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "digits": 1}}},
    "rewards": [{"fn": "exact_match"}],
    "algorithm": {"group_size": 4, "prompts_per_step": 2, "micro_batch_size": 8},
}
DLM_POLICY = {"family": "diffusion_lm", "model": "builtin:arith-dlm"}

#: old key -> (the section's keys, the exact message); every key a field ``replaces`` has a case
OLD_KEYS: dict[str, tuple[dict[str, Any], str]] = {
    "advantage_args": (
        {"advantage_args": {"eps": 1e-6}},
        "algorithm.advantage_args = {eps: 1.0e-06} was replaced by the option form: write "
        "algorithm.advantage: {name: grpo, eps: 1.0e-06}.",
    ),
    "reward_combination_args": (
        {"reward_combination": "self_paced", "reward_combination_args": {"competence_momentum": 0.5}},
        "algorithm.reward_combination_args = {competence_momentum: 0.5} was replaced by the option form: write "
        "algorithm.reward_combination: {name: self_paced, competence_momentum: 0.5}.",
    ),
    "reward_shaping_args": (
        {"reward_shaping": ["submodular_diversity"], "reward_shaping_args": {"submodular_diversity": {"eps": 0.0}}},
        "algorithm.reward_shaping_args = {submodular_diversity: {eps: 0.0}} was replaced by the option form: write "
        "algorithm.reward_shaping: [{name: submodular_diversity, eps: 0.0}].",
    ),
    "objective_args": (
        {"objective_args": {"eps_low": 0.2, "eps_high": 0.28}},
        "algorithm.objective_args = {eps_low: 0.2, eps_high: 0.28} was replaced by the option form: write "
        "algorithm.clip: {name: ppo, eps_low: 0.2, eps_high: 0.28} (eps_low, eps_high: keywords of clip form 'ppo').",
    ),
    "aggregation_args": (
        {"aggregation": "seq_mean_token_sum_norm", "aggregation_args": {"max_len": 3000}},
        "algorithm.aggregation_args = {max_len: 3000} was replaced by the option form: write "
        "algorithm.aggregation: {name: seq_mean_token_sum_norm, max_len: 3000}.",
    ),
    "credit_args": (
        {"credit": ["tree", "noise_aware_steps"], "credit_args": {"tree": {"width_keep_fraction": 0.5}}},
        "algorithm.credit_args = {tree: {width_keep_fraction: 0.5}} was replaced by the option form: write "
        "algorithm.credit: [{name: tree, width_keep_fraction: 0.5}, noise_aware_steps].",
    ),
    "regularizer_args": (
        {"regularizer": "low_probability", "regularizer_args": {"noise_ratio": 0.5}},
        "algorithm.regularizer_args = {noise_ratio: 0.5} was replaced by the option form: write "
        "algorithm.regularizer: {name: low_probability, noise_ratio: 0.5}.",
    ),
    "update_schedule_args": (
        {"update_schedule": "sfpo", "update_schedule_args": {"fast_steps": 3}},
        "algorithm.update_schedule_args = {fast_steps: 3} was replaced by the option form: write "
        "algorithm.update_schedule: {name: sfpo, fast_steps: 3}.",
    ),
    "sample_source_args": (
        {"sample_sources": ["depo", "gfpo"], "sample_source_args": {"gfpo": {"samples": 16}}},
        "algorithm.sample_source_args = {gfpo: {samples: 16}} was replaced by the option form: write "
        "algorithm.sample_sources: [depo, {name: gfpo, samples: 16}].",
    ),
    "proxy_args": (
        {"likelihood_proxy": "coupled", "proxy_args": {"level": "sequence"}},
        "policy.proxy_args = {level: sequence} was replaced by the option form: write "
        "policy.likelihood_proxy: {name: coupled, level: sequence}.",
    ),
    "decoding_policy_args": (
        {"decoding_policy": "count_schedule", "decoding_policy_args": {"init_logit": 3.0}},
        "policy.decoding_policy_args = {init_logit: 3.0} was replaced by the option form: write "
        "policy.decoding_policy: {name: count_schedule, init_logit: 3.0}.",
    ),
}

#: more objective_args: each keyword goes to the option it belongs to
OBJECTIVE_ARGS: list[tuple[dict[str, Any], str]] = [
    (
        {"ratio_level": "chunk", "objective_args": {"chunk_boundaries": [0, 2], "eps_high": 0.001}},
        "write algorithm.ratio_level: {name: chunk, chunk_boundaries: [0, 2]} and algorithm.clip: {name: ppo, "
        "eps_high: 0.001} (chunk_boundaries: a keyword of ratio level 'chunk'; eps_high: a keyword of clip form 'ppo').",
    ),
    (
        {"objective": "lopti", "objective_args": {"threshold": 0.5, "eps_high": 0.28}},
        "write algorithm.objective: {name: lopti, threshold: 0.5} and algorithm.clip: {name: ppo, eps_high: 0.28} "
        "(threshold: a keyword of objective 'lopti'; eps_high: a keyword of clip form 'ppo').",
    ),
    (
        {"objective": "nft", "objective_args": {"beta": 1.0}},
        "algorithm.objective_args = {beta: 1.0} was replaced by the option form: write algorithm.objective: "
        "{name: nft, beta: 1.0}.",
    ),
    (
        {"clip": {"name": "dual_clip", "eps_low": 0.1}, "objective_args": {"dual_clip_c": 3.0}},
        "write algorithm.clip: {name: dual_clip, eps_low: 0.1, dual_clip_c: 3.0}",
    ),
    (
        {"objective_args": {"eps_hgh": 0.3}},
        "'eps_hgh': a keyword of none of objective 'clipped_ratio', ratio level 'token', clip form 'ppo'. Did you "
        "mean 'eps_high'",
    ),
    ({"objective_args": {}}, "algorithm.objective_args = {} was replaced by the option form (it holds no keywords: "),
    (
        {"regularizer_args": {"noise_ratio": 0.5}},
        "(algorithm.regularizer is null, so they had no effect: remove them, or name the option: algorithm.regularizer: "
        "{name: NAME, noise_ratio: 0.5}).",
    ),
    (
        {"objective": "disco", "aggregation_args": {"max_len": 8}},
        "write algorithm.aggregation: {name: seq_mean_token_mean, max_len: 8}.",  # the mode a null aggregation took
    ),
    (
        {"credit": ["tree"], "credit_args": {"trees": {"mode": "per_depth"}}},
        "write algorithm.credit: [tree] (its arguments for 'trees' name no entry of algorithm.credit; add it to the "
        "list",
    ),
]


def write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def config_with(section: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(LM)
    if {"likelihood_proxy", "decoding_policy"} & set(section):
        data["policy"] = {**DLM_POLICY, **section}
    else:
        data["algorithm"].update(section)
    return data


def test_every_replaced_key_has_a_case():
    assert set(replaced_keys(AlgorithmConfig)) | set(replaced_keys(DiffusionLMPolicyConfig)) == set(OLD_KEYS)


@pytest.mark.parametrize("old", list(OLD_KEYS))
def test_an_old_key_is_refused_with_its_new_form(tmp_path, old):
    section, message = OLD_KEYS[old]
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path / "c.yaml", config_with(section)))
    assert str(err.value) == message


@pytest.mark.parametrize(("section", "message"), OBJECTIVE_ARGS)
def test_the_new_form_puts_each_keyword_where_it_belongs(tmp_path, section, message):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path / "c.yaml", config_with(section)))
    assert message in str(err.value)


def test_several_old_keys_are_reported_together(tmp_path):
    section = {"advantage_args": {"eps": 1e-6}, "objective_args": {"eps_high": 0.28}}
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path / "c.yaml", config_with(section)))
    assert "write algorithm.advantage: {name: grpo, eps: 1.0e-06}." in str(err.value)
    assert "write algorithm.clip: {name: ppo, eps_high: 0.28}" in str(err.value)


def old_run_config(output_dir: Path) -> dict[str, Any]:
    """A run config as an older version saved it (every field resolved): every option a name, its keywords in
    ``*_args``."""
    data = to_dict(from_dict(TrainConfig, {**copy.deepcopy(LM), "run": {"output_dir": str(output_dir)}}))
    data["algorithm"].update({
        "advantage": "grpo", "advantage_args": {"eps": 1e-6}, "reward_combination": "weighted_sum",
        "reward_combination_args": {}, "reward_shaping": [], "reward_shaping_args": {}, "objective": "clipped_ratio",
        "ratio_level": "token", "clip": "ppo", "objective_args": {"eps_low": 0.2, "eps_high": 0.28},
        "aggregation": "token_mean", "aggregation_args": {}, "credit": ["entropy_reward"],
        "credit_args": {"entropy_reward": {"level": "sequence"}}, "regularizer": None, "regularizer_args": {},
        "update_schedule": "standard", "update_schedule_args": {}, "sample_sources": [], "sample_source_args": {},
    })  # fmt: skip
    return data


EXPECTED = {
    "advantage": Option("grpo", {"eps": 1e-6}),
    "clip": Option("ppo", {"eps_low": 0.2, "eps_high": 0.28}),
    "credit": [Option("entropy_reward", {"level": "sequence"})],
    "aggregation": Option("token_mean"),
    "regularizer": None,
}


def test_a_run_config_of_an_older_version_is_read_in_the_new_form(tmp_path, capsys):
    run = tmp_path / "run"
    saved = write(run / "config.yaml", old_run_config(run))
    (run / "metrics.jsonl").write_text("")
    config = load_config(saved)
    assert {key: getattr(config.algorithm, key) for key in EXPECTED} == EXPECTED
    note = capsys.readouterr().err
    assert "written by an older genalign version" in note
    assert "algorithm.objective_args -> algorithm.clip" in note and "algorithm.credit_args -> algorithm.credit" in note
    assert "reward_shaping_args" not in note  # empty ones are dropped without a word
    assert yaml.safe_load(saved.read_text()) == old_run_config(run)  # the file is never rewritten
    checkpoint = write(run / "checkpoints" / "step-2" / "config.yaml", old_run_config(run))
    (checkpoint.parent / "COMPLETE").write_text("")
    assert load_config(checkpoint).algorithm == config.algorithm
    with pytest.raises(ConfigError, match=r"algorithm.advantage_args = .* write algorithm.advantage"):
        load_config(write(tmp_path / "mine" / "config.yaml", old_run_config(run)))  # a user's file: never migrated


def test_a_checkpoint_of_an_older_version_resumes_with_the_new_form(tmp_path):
    run = tmp_path / "run"
    folder = write(run / "checkpoints" / "step-2" / "config.yaml", old_run_config(run)).parent
    saved = checkpoint_config(folder)
    assert saved["algorithm"]["clip"] == {"name": "ppo", "eps_low": 0.2, "eps_high": 0.28}
    assert not [key for key in saved["algorithm"] if key.endswith("_args")]
    current = copy.deepcopy(LM)
    current["run"] = {"output_dir": str(run)}
    current["algorithm"].update({
        "advantage": {"name": "grpo", "eps": 1e-6}, "clip": {"name": "ppo", "eps_low": 0.2, "eps_high": 0.28},
        "credit": [{"name": "entropy_reward", "level": "sequence"}],
    })  # fmt: skip
    resumed = to_dict(load_config(write(tmp_path / "c.yaml", current)))
    check_resume_compatible(saved, resumed, allowed=[])
    resumed["algorithm"]["advantage"] = "grpo"  # another hyper-parameter of the same estimator: not another setup
    check_resume_compatible(saved, resumed, allowed=[])
    resumed["algorithm"]["advantage"] = {"name": "rloo", "eps": 1e-6}
    with pytest.raises(RunDirectoryError, match=r"algorithm.advantage.name = 'grpo', this run has .* = 'rloo'"):
        check_resume_compatible(saved, resumed, allowed=[])
    check_resume_compatible(saved, resumed, allowed=["algorithm.advantage"])


# ---- the flow family's flat LoRA keys (policy.lora_rank ...) moved into policy.lora -----------------------------------
FLAT_LORA = {"lora_rank": 8, "lora_alpha": 16.0, "lora_target_modules": None, "lora_use_dora": False,
             "lora_use_rslora": True, "lora_init_weights": "gaussian"}  # fmt: skip


def flow_config(output_dir: Path) -> dict[str, Any]:
    import tests.policies.contract_reward  # noqa: F401  (registers the reward)
    from tests.policies.contract_cases import case_config

    return case_config("flow_sde", str(output_dir))


def test_a_flat_lora_key_is_refused_with_its_place_in_the_lora_section(tmp_path):
    config = flow_config(tmp_path / "run")
    del config["policy"]["lora"]
    config["policy"] |= {"lora_rank": 8, "lora_alpha": 16.0}
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path / "c.yaml", config))
    assert str(err.value) == (
        "policy.lora_rank = 8 moved into the section policy.lora: write policy.lora: {rank: 8} (as an override: "
        "policy.lora.rank=8). policy.lora_alpha = 16.0 moved into the section policy.lora: write policy.lora: "
        "{alpha: 16.0} (as an override: policy.lora.alpha=16.0)."
    )
    del config["policy"]["lora_rank"], config["policy"]["lora_alpha"]
    with pytest.raises(ConfigError, match=r"write policy.lora: \{use_dora: true\} \(as an override: "
                                          r"policy.lora.use_dora=true\)\.$"):  # fmt: skip
        load_config(write(tmp_path / "c.yaml", config), ["policy.lora_use_dora=true"])


def test_a_partial_lora_section_keeps_the_flow_defaults(tmp_path):
    from genalign.policies.flow import flow_lora

    config = flow_config(tmp_path / "run")
    del config["policy"]["lora"]
    path = write(tmp_path / "c.yaml", config)
    assert load_config(path).policy.lora == flow_lora()  # rank 32, alpha 64, the architecture's projections
    assert load_config(path, ["policy.lora.rank=8"]).policy.lora == flow_lora(rank=8)
    assert load_config(path, ["policy.lora.use_rslora=true"]).policy.lora == flow_lora(use_rslora=True)


def test_a_flow_run_config_with_flat_lora_keys_is_read_and_resumed_in_the_new_form(tmp_path, capsys):
    from genalign.policies.flow import flow_lora

    run = tmp_path / "run"
    old = to_dict(from_dict(TrainConfig, flow_config(run)))
    del old["policy"]["lora"]
    old["policy"] |= FLAT_LORA
    saved = write(run / "config.yaml", old)
    (run / "metrics.jsonl").write_text("")
    expected = flow_lora(rank=8, alpha=16.0, use_rslora=True, init_lora_weights="gaussian")
    assert load_config(saved).policy.lora == expected
    assert "policy.lora_rank -> policy.lora" in capsys.readouterr().err
    checkpoint = write(run / "checkpoints" / "step-2" / "config.yaml", old).parent
    current = flow_config(run)
    current["policy"]["lora"] = {"rank": 8, "alpha": 16.0, "use_rslora": True, "init_lora_weights": "gaussian"}
    resumed = to_dict(load_config(write(tmp_path / "c.yaml", current)))
    check_resume_compatible(checkpoint_config(checkpoint), resumed, allowed=[])
    resumed["policy"]["lora"]["rank"] = 4
    with pytest.raises(RunDirectoryError, match=r"policy.lora = "):
        check_resume_compatible(checkpoint_config(checkpoint), resumed, allowed=[])
