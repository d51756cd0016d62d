"""`genalign validate` accepts a config using each sample-source rule (``algorithm.sample_sources``) on the causal-LM
demo (``builtin:arith-lm``), and rejects wrong names, arguments and combinations, naming the field and the fix."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest
import yaml

from genalign.cli import main
from genalign.config import ConfigError, from_dict
from genalign.config.schema import TrainConfig
from genalign.registry import Option
from genalign.sampling import SAMPLE_SOURCES

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BASE: dict[str, Any] = {
    "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_new_tokens": 4},
    "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "digits": 1}}},
    "rewards": [{"fn": "exact_match"}],
    "algorithm": {"group_size": 4, "prompts_per_step": 2, "micro_batch_size": 8},
}

OPTIONS = {
    "overlong_filter": {"sample_sources": ["overlong_filter"]},
    "conditional_overlong_filter": {"sample_sources": [{"name": "conditional_overlong_filter", "max_fraction": 0.2}]},
    "depo": {"sample_sources": [{"name": "depo", "easy": 0.9, "hard": 0.1, "momentum": 0.5}]},
    "spo": {"sample_sources": [{"name": "spo", "discount": 0.8, "pool": 3.0}]},
    "gfpo": {"sample_sources": [{"name": "gfpo", "samples": 8, "metric": "token_efficiency"}]},
    "diversity_temperature": {"sample_sources": [{"name": "diversity_temperature", "temperatures": [0.8, 1.0, 1.2]}]},
    "gfpo_adaptive_difficulty": {"sample_sources": [{"name": "gfpo", "samples": 8, "adaptive_k": [6, 5, 4, 2]}]},
    "composed": {"sample_sources": ["depo", "spo", "gfpo", "overlong_filter"], "dynamic_sampling": {"enabled": True}},
    "adagrpo_curriculum": {"sample_sources": ["adagrpo_curriculum"]},
    "vas": {"sample_sources": ["vas"]},
    "erpo": {"sample_sources": ["erpo"]},
    "dars": {"sample_sources": [{"name": "dars", "schedule": "hardness_weighted"}]},
    "aero": {"sample_sources": ["aero"]},
    "xrpo": {"sample_sources": ["xrpo"]},
    "d3s_samples": {"sample_sources": ["d3s_samples"]},
    "repo": {"sample_sources": [{"name": "repo", "replays": 4, "min_stored": 4}], "clip": "off_policy"},
    "eframe": {"sample_sources": [{"name": "eframe", "extra_samples": 4}], "clip": "off_policy"},
    "ar3po": {"sample_sources": [{"name": "ar3po", "stages": 2}], "clip": "off_policy"},
    "sage": {"sample_sources": ["sage"]},
    "adaprefix": {"sample_sources": ["adaprefix"]},
    "difficulty_shift": {"sample_sources": [{"name": "difficulty_shift", "solution_column": "answer"}]},
    "scaf": {"sample_sources": [{"name": "scaf", "hints": ["hint_1", "hint_2"]}]},
    "gcpo": {"sample_sources": ["gcpo"]},
    "edge_gec": {"sample_sources": [{"name": "edge_gec", "tokenizer": "builtin:arith-lm"}]},
    "composed_rounds": {"sample_sources": ["dars", "gcpo", "overlong_filter"]},
    "value_budget": {"sample_sources": [{"name": "value_budget", "base_samples": 2}]},
    "serial_exits": {"sample_sources": [{"name": "serial_exits", "tokenizer": "builtin:arith-lm", "at": "tokens",
                                         "answer_marker": None, "cue": "="}], "reward_shaping": ["exit_decay"]},
    "dynamic_truncation": {"sample_sources": [{"name": "dynamic_truncation", "tokenizer": "builtin:arith-lm",
                                               "confidence": 0.8}], "reward_shaping": ["step_redundancy"]},
    "draft_refinement": {"sample_sources": [{"name": "draft_refinement", "tokenizer": "builtin:arith-lm", "drafts": 2}]},
    "reward_goals": {"sample_sources": [{"name": "reward_goals", "goals": ["+", "-"]}]},
    "in_context_expert": {"sample_sources": [{"name": "in_context_expert", "solution_column": "answer"}],
                          "clip": "off_policy", "reward_shaping": ["expert_bonus"]},
    "mixed_prefix": {"sample_sources": [{"name": "mixed_prefix", "mixed": 1}], "clip": "off_policy"},
    "expert_warmup": {"sample_sources": [{"name": "expert_warmup", "warmup_steps": 2, "solution_column": "answer"}],
                      "regularizer": "expert_nll", "credit": ["entropy_gated"]},
    "sentence_edits": {"sample_sources": [{"name": "sentence_edits", "tokenizer": "builtin:arith-lm",
                                           "solution_column": "answer", "keep_overlap": 0.6}]},
    # samples the teacher writes (algorithm.teacher: here the demo's own weights as a teacher model)
    "teacher_sft": {"sample_sources": [{"name": "teacher_sft", "rollouts": 2, "until_step": 10}],
                    "regularizer": "expert_nll", "teacher": {"source": "model", "model": "builtin:arith-lm"}},
    "tgpo": {"sample_sources": [{"name": "tgpo", "guided": 1}], "clip": "off_policy",
             "teacher": {"source": "self", "weights": "current", "context": " {answer}"}},
    "mentor": {"sample_sources": [{"name": "mentor", "span": 2}], "clip": "off_policy",
               "teacher": {"source": "model", "model": "builtin:arith-lm"}},
    "hapo": {"sample_sources": [{"name": "hapo", "decay": 0.8}], "clip": "off_policy",
             "teacher": {"source": "model", "model": "builtin:arith-lm"}},
    "small_to_large": {"sample_sources": [{"name": "small_to_large", "start_fraction": 0.5}], "clip": "off_policy",
                       "teacher": {"source": "model", "model": "builtin:arith-lm"}},
}  # fmt: skip


def config(algorithm: dict[str, Any] | None = None, policy: dict[str, Any] | None = None) -> TrainConfig:
    data = copy.deepcopy(BASE)
    data["algorithm"].update(algorithm or {})
    if policy is not None:
        data["policy"] = dict(policy)
    return from_dict(TrainConfig, data)


def test_every_registered_rule_has_a_case():
    assert set(SAMPLE_SOURCES.names()) <= set(OPTIONS)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_validate_accepts_each_sample_source(name, tmp_path, capsys):
    cfg = config(OPTIONS[name])
    assert cfg.algorithm.sample_sources == [Option.parse(rule) for rule in OPTIONS[name]["sample_sources"]]
    path = tmp_path / "config.yaml"
    data = copy.deepcopy(BASE)
    data["algorithm"].update(OPTIONS[name])
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) in (0, None)
    assert "sample_sources" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("algorithm", "policy", "message"),
    [
        ({"sample_sources": ["dpeo"]}, None, r"algorithm.sample_sources rule 'dpeo': unknown sample source .*'depo'"),
        ({"sample_sources": [{"name": "depo", "eassy": 0.9}]}, None, "Did you mean 'easy'"),
        ({"sample_sources": [{"name": "depo", "easy": 1.5}]}, None, r"easy = 1.5 must be in"),
        ({"sample_sources": [{"easy": 0.9}]}, None, r"algorithm.sample_sources\[0\]: the mapping .* has no 'name'"),
        ({"sample_sources": "depo"}, None, r"algorithm.sample_sources: expected a list of options .* e.g. \[depo\]"),
        ({"sample_sources": ["spo", "spo"]}, None, "more than once"),
        ({"sample_sources": [{"name": "spo"}, {"name": "spo", "pool": 2.0}]}, None, "more than once"),
        ({"sample_sources": [{"name": "gfpo", "samples": 4}]}, None, "must exceed"),
        ({"sample_sources": [{"name": "gfpo", "metric": "brevity"}]}, None, "metric = 'brevity'"),
        ({"sample_sources": [{"name": "gfpo", "samples": 8, "adaptive_k": [8, 6, 4, 2]}]}, None, "adaptive_k"),
        ({"sample_sources": ["overlong_filter"]}, {"family": "flow", "model": "some/pipeline"}, "'truncated'"),
        ({"sample_sources": ["repo"]}, None, "set algorithm.clip = off_policy"),
        ({"sample_sources": ["erpo"]}, {"family": "flow", "model": "some/pipeline"}, r"guidance \['temperature'\]"),
        ({"sample_sources": ["gcpo"]}, {"family": "flow", "model": "some/pipeline"}, "forced_completions"),
        ({"sample_sources": ["dars"], "group_size": 4},
         {"family": "causal_lm", "model": "builtin:arith-lm", "max_new_tokens": 4,
          "tree": {"enabled": True, "split_positions": [1, 2], "branching": [2, 2]}}, "turn policy.tree off"),
    ],
)  # fmt: skip
def test_invalid_sample_sources_name_the_field_and_the_fix(algorithm, policy, message):
    with pytest.raises(ConfigError, match=message):
        config(algorithm, policy)
