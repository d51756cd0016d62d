"""Every registry choice of a config is an option: its name, or a mapping of its name and its keyword hyper-parameters
(``genalign.config.core``). Both forms load, bad forms name the field, the value and the forms, overrides reach an
option's keywords, and saved configs write the short form and load again."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest
import yaml

from genalign import algorithms as alg
from genalign.config import ConfigError, from_dict, load_config, to_dict
from genalign.config.core import apply_overrides
from genalign.config.schema import AlgorithmConfig, TrainConfig
from genalign.policies.dlm.config import DiffusionLMPolicyConfig
from genalign.registry import Option

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BASE: dict[str, Any] = {
    "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_new_tokens": 4},
    "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "digits": 1}}},
    "rewards": [{"fn": "exact_match"}],
    "algorithm": {"group_size": 4, "prompts_per_step": 2, "micro_batch_size": 8},
}


def load(tmp_path, algorithm: dict[str, Any] | None = None, *overrides: str) -> TrainConfig:
    data = copy.deepcopy(BASE)
    data["algorithm"].update(algorithm or {})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_config(path, list(overrides))


def test_an_option_is_its_name_or_a_mapping_of_its_name_and_keywords(tmp_path):
    cfg = load(tmp_path, {
        "advantage": "grpo",
        "clip": {"name": "ppo", "eps_low": 0.2, "eps_high": 0.28},
        "credit": ["entropy_reward", {"name": "high_entropy_tokens", "rho": 0.5}],
        "sample_sources": [{"name": "gfpo", "samples": 8}],
    })  # fmt: skip
    algorithm = cfg.algorithm
    assert algorithm.advantage == Option("grpo") and algorithm.objective == Option("clipped_ratio")
    assert algorithm.clip == Option("ppo", {"eps_low": 0.2, "eps_high": 0.28})
    assert algorithm.credit == [Option("entropy_reward"), Option("high_entropy_tokens", {"rho": 0.5})]
    assert algorithm.sample_sources == [Option("gfpo", {"samples": 8})]
    assert algorithm.objective_kwargs() == {"ratio_level": "token", "clip": "ppo", "eps_low": 0.2, "eps_high": 0.28}
    assert [name for name, _ in algorithm.advantage_stage().credit] == ["entropy_reward", "high_entropy_tokens"]
    assert Option.parse({"name": "grpo"}) == Option("grpo") and to_dict(Option("grpo")) == "grpo"


@pytest.mark.parametrize(
    ("algorithm", "message"),
    [
        ({"advantage": 1}, r"algorithm.advantage: expected an option name, or a mapping .*, got 1\."),
        ({"advantage": ""}, r"algorithm.advantage: expected an option name"),
        ({"advantage": ["grpo"]}, r"algorithm.advantage: expected one option, got the list \['grpo'\]"),
        ({"clip": {"eps_high": 0.28}},
         r"algorithm.clip: the mapping \{'eps_high': 0.28\} has no 'name'.* algorithm.clip: \{name: NAME, eps_high: "),
        ({"clip": {"name": 3}}, r"algorithm.clip.name: expected the option's name \(a string\), got 3"),
        ({"credit": "entropy_reward"}, r"algorithm.credit: expected a list of options .* e.g. \[entropy_reward\]"),
        ({"credit": [5]}, r"algorithm.credit\[0\]: expected an option name"),
        ({"advantage": {"name": "grpo", "epsilon": 1e-6}},
         r"algorithm.advantage: advantage estimator 'grpo' got unknown hyper-parameter\(s\) 'epsilon'. Did you mean "
         r"'eps'\?"),
        ({"clip": {"name": "ppo", "eps_hihg": 0.3}}, r"algorithm.clip: clip form 'ppo' .*Did you mean 'eps_high'"),
        ({"credit": [{"name": "high_entropy_tokens", "rhoo": 0.2}]},
         r"algorithm.credit: credit rule 'high_entropy_tokens' got unknown .*'rhoo'. Did you mean 'rho'"),
        ({"objective": {"name": "clipped_ratio", "eps_high": 0.28}},
         r"algorithm.objective/ratio_level/clip: .*'eps_high' is a keyword of clip form 'ppo'"),
        ({"ratio_level": {"name": "token", "eps_high": 0.28}}, r"algorithm.ratio_level: ratio level 'token' got"),
    ],
)  # fmt: skip
def test_bad_option_forms_name_the_field_the_value_and_the_forms(tmp_path, algorithm, message):
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, algorithm)


def test_configs_built_in_python_take_the_same_forms():
    algorithm = AlgorithmConfig(clip="dual_clip", credit=["tree", {"name": "noise_aware_steps"}], objective="nft")
    assert algorithm.clip == Option("dual_clip") and algorithm.objective == Option("nft")
    assert algorithm.credit == [Option("tree"), Option("noise_aware_steps")]
    assert algorithm.aggregation == Option("token_mean")  # resolved from the objective
    with pytest.raises(ConfigError, match=r"algorithm.clip: the mapping .* has no 'name'"):
        AlgorithmConfig(clip={"eps_high": 0.2})
    proxy = DiffusionLMPolicyConfig(likelihood_proxy={"name": "mc_elbo", "num_samples": 2}).likelihood_proxy
    assert proxy == Option("mc_elbo", {"num_samples": 2})


def test_overrides_reach_the_keywords_of_an_option():
    def override(data: dict[str, Any], *items: str) -> dict[str, Any]:
        return apply_overrides(copy.deepcopy(data), list(items), TrainConfig)

    data = {"algorithm": {"clip": "ppo", "credit": ["tree", "noise_aware_steps"]}}
    assert override(data, "algorithm.clip.eps_high=0.28")["algorithm"]["clip"] == {"name": "ppo", "eps_high": 0.28}
    assert override(data, "algorithm.credit.0.width_keep_fraction=0.5")["algorithm"]["credit"] == [
        {"name": "tree", "width_keep_fraction": 0.5},
        "noise_aware_steps",
    ]
    assert override(data, "algorithm.credit=[entropy_reward,aem]")["algorithm"]["credit"] == ["entropy_reward", "aem"]
    assert override({}, "algorithm.ratio_level.chunk_boundaries=[0, 2]")["algorithm"]["ratio_level"] == {
        "name": "token",  # not given: the field's default, in the mapping form
        "chunk_boundaries": [0, 2],
    }
    mapping = {"algorithm": {"clip": {"name": "ppo", "eps_high": 0.28}}}
    assert override(mapping, "algorithm.clip.name=dual_clip")["algorithm"]["clip"] == {
        "name": "dual_clip",  # another form, the same keywords
        "eps_high": 0.28,
    }
    assert override(mapping, "algorithm.clip=cispo")["algorithm"]["clip"] == "cispo"  # another option, its defaults
    dlm = {"policy": {"family": "diffusion_lm", "likelihood_proxy": "coupled"}}
    assert override(dlm, "policy.likelihood_proxy.num_samples=2")["policy"]["likelihood_proxy"] == {
        "name": "coupled",
        "num_samples": 2,
    }
    with pytest.raises(ConfigError, match="not a section"):  # a field that is not an option keeps its value
        override({"run": {"output_dir": "x"}}, "run.output_dir.sub=1")


def test_overrides_into_options_load(tmp_path):
    cfg = load(tmp_path, None, "algorithm.clip.eps_high=0.3", "algorithm.credit=[entropy_reward,high_entropy_tokens]",
               "algorithm.credit.0.level=sequence", "algorithm.advantage={name: grpo, eps: 1.0e-4}")  # fmt: skip
    assert cfg.algorithm.clip == Option("ppo", {"eps_high": 0.3})
    assert cfg.algorithm.credit == [Option("entropy_reward", {"level": "sequence"}), Option("high_entropy_tokens")]
    assert cfg.algorithm.advantage == Option("grpo", {"eps": 1e-4})
    with pytest.raises(ConfigError, match=r"algorithm.regularizer: the mapping \{'temperature': 1.5\} has no 'name'"):
        load(tmp_path, None, "algorithm.regularizer.temperature=1.5")  # no default to name it
    regularized = load(
        tmp_path, None, "algorithm.regularizer=distribution_entropy", "algorithm.regularizer.temperature=1.5"
    )
    assert regularized.algorithm.regularizer == Option("distribution_entropy", {"temperature": 1.5})


def test_saved_configs_write_bare_names_and_mappings_and_load_again(tmp_path):
    cfg = load(tmp_path, {
        "clip": {"name": "ppo", "eps_low": 0.2, "eps_high": 0.28},
        "credit": [{"name": "entropy_reward", "level": "sequence"}, "high_entropy_tokens"],
        "update_schedule": {"name": "sfpo", "fast_steps": 2},
    })  # fmt: skip
    saved = to_dict(cfg)["algorithm"]
    assert saved["advantage"] == "grpo" and saved["ratio_level"] == "token" and saved["aggregation"] == "token_mean"
    assert saved["clip"] == {"name": "ppo", "eps_low": 0.2, "eps_high": 0.28}
    assert saved["credit"] == [{"name": "entropy_reward", "level": "sequence"}, "high_entropy_tokens"]
    assert saved["update_schedule"] == {"name": "sfpo", "fast_steps": 2} and saved["regularizer"] is None
    assert not [key for key in saved if key.endswith("_args")]
    again = from_dict(TrainConfig, yaml.safe_load(yaml.safe_dump(to_dict(cfg))))
    assert again.algorithm == cfg.algorithm and to_dict(again) == to_dict(cfg)


def test_the_loss_plan_takes_each_options_keywords_from_that_option():
    plan = alg.LossPlan.build(
        objective=Option("clipped_ratio"),
        ratio_level=Option("chunk", {"chunk_boundaries": [0, 2]}),
        clip=Option("ppo", {"eps_high": 0.28}),
    )
    assert plan.objective.loss.level_hp == {"chunk_boundaries": [0, 2]} and plan.objective.loss.clip_hp == {
        "eps_high": 0.28
    }
    with pytest.raises(alg.HyperparameterError, match="'eps_high' is a keyword of clip form 'ppo'"):
        alg.LossPlan.build(objective=Option("clipped_ratio", {"eps_high": 0.28}))
    with pytest.raises(alg.HyperparameterError, match="clip form 'ppo' got unknown hyper-parameter"):
        alg.LossPlan.build(objective=Option("clipped_ratio"), clip=Option("ppo", {"chunk_boundaries": [0, 2]}))
