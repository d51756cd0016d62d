"""``algorithm.teacher`` is validated strictly at config load: each field belongs to its source, a distillation rule
needs a teacher and a teacher needs a reader, the teacher supplies what the rules read, and each policy family hosts
only the teachers it can score (the refusal says why)."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from genalign.config import ConfigError, from_dict, load_config
from genalign.config.schema import TrainConfig
from tests.algorithms.arith_config import arith_lm_config

ROOT = Path(__file__).resolve().parents[2]
MODEL = {"source": "model", "model": "builtin:arith-lm"}
HINTED = {"source": "self", "weights": "current", "context": " {answer}"}
REMOTE = {"source": "remote", "remote": {"url": "http://127.0.0.1:9/teacher"}}


@pytest.mark.parametrize(
    ("algorithm", "message"),
    [
        (
            {"credit": ["opd"]},
            r"credit rule 'opd' needs 'teacher_action_logp', which a teacher supplies; set "
            r"algorithm.teacher",
        ),
        ({"teacher": MODEL}, "no configured option reads a teacher signal"),
        (
            {"credit": ["opd"], "teacher": {**HINTED, "model": "x"}},
            "model is set, but it belongs to source 'model', not source 'self'",
        ),
        ({"credit": ["opd"], "teacher": {"source": "self", "weights": "current"}}, "is the student itself"),
        ({"credit": ["opd"], "teacher": {"source": "model"}}, "source 'model' needs model"),
        ({"credit": ["opd"], "teacher": {**HINTED, "context": "{answer"}}, "brace that is not a placeholder"),
        ({"credit": ["opd"], "teacher": {**HINTED, "context": "{other.answer}"}}, "only the contrast_context may"),
        ({"credit": ["opd"], "teacher": {**MODEL, "family": "vlm"}}, "must be a model of the policy's family"),
        ({"credit": ["opd"], "teacher": {**MODEL, "wieghts": "base"}}, "Did you mean 'weights'"),
        ({"credit": ["opd"], "teacher": {"source": "remote", "remote": {"url": "ftp://x"}}}, "http:// or https://"),
        ({"credit": ["opd"], "teacher": {**REMOTE, "remote": {**REMOTE["remote"], "timeout_s": 0}}}, "timeout_s=0"),
        (
            {"credit": ["routed_distillation"], "teacher": REMOTE},
            "'teacher_entropy', which is not supplied by a 'remote' teacher",
        ),
        ({"credit": ["contrastive_distillation"], "teacher": HINTED}, "needs algorithm.teacher.contrast_context"),
        ({"credit": [{"name": "opd", "forward_until": 2.0}], "teacher": MODEL}, "forward_until=2.0 must be a fraction"),
        (
            {"credit": ["opd"], "teacher": REMOTE, "sample_sources": [{"name": "adaprefix"}]},
            "a remote teacher gets the dataset's prompts",
        ),
        (
            {"sample_sources": ["teacher_sft"], "regularizer": "expert_nll"},
            "rule 'teacher_sft' adds samples the teacher writes, but algorithm.teacher is not set",
        ),
        (
            {"sample_sources": ["teacher_sft"], "regularizer": "expert_nll", "teacher": REMOTE},
            "a remote teacher only scores token ids",
        ),
        ({"sample_sources": ["tgpo"], "teacher": MODEL}, "set algorithm.clip = off_policy"),
        (
            {"credit": ["full_distillation"], "teacher": REMOTE},
            "'teacher_vocab_(reverse|forward)_kl', which is not supplied",
        ),
        ({"credit": ["dpo_token_reward"], "teacher": MODEL}, "'teacher_anchor_logp', which is not supplied"),
        (
            {"credit": ["aligndistil"], "teacher": {**MODEL, "distribution": {"anchor": "reference"}}},
            "'teacher_extrapolation', which is not supplied",
        ),
        (
            {"credit": ["opd"], "teacher": {**MODEL, "distribution": {"extrapolation": 2.0}}},
            "needs distribution.anchor",
        ),
        (
            {"credit": ["opd"], "teacher": {**HINTED, "routing": {"column": "op", "experts": {"+": "x"}}}},
            "needs source 'model'",
        ),
        ({"credit": ["opd"], "teacher": {**MODEL, "routing": {"column": "op"}}}, "give both"),
        ({"credit": ["opd"], "teacher": {**HINTED, "context": " {sample.logits}"}}, "sample's own fields"),
    ],
)
def test_bad_teacher_configs_name_the_field_and_the_fix(algorithm, message):
    with pytest.raises(ConfigError, match=message):
        arith_lm_config(**algorithm)


def test_good_teacher_configs_load_with_their_needs():
    config = arith_lm_config(credit=["contrastive_distillation"],
                             teacher={**HINTED, "contrast_context": " {other.answer}"})  # fmt: skip
    assert config.algorithm.teacher.supplies() >= {"teacher_action_logp", "teacher_contrast_logp"}
    remote = arith_lm_config(credit=["opd"], teacher=REMOTE)
    assert "action_ids" in remote.algorithm.needs()  # the server scores the sampled token ids
    distribution = {"anchor": "reference", "extrapolation": 2.0}
    full = arith_lm_config(credit=["aligndistil", "dpo_token_reward", "full_distillation"],
                           teacher={**MODEL, "distribution": distribution})  # fmt: skip
    assert full.algorithm.teacher.kinds() == {"model", "distribution", "reference"}
    routed = arith_lm_config(
        credit=["opd"],
        teacher={"source": "model", "routing": {"column": "operator", "experts": {"+": "builtin:arith-lm"}}},
    )
    assert routed.algorithm.teacher.routing.experts == {"+": "builtin:arith-lm"}


def test_a_teacher_that_only_writes_needs_no_reader():
    config = arith_lm_config(sample_sources=[{"name": "hapo"}], clip="off_policy", teacher=MODEL)
    assert config.algorithm.teacher.source == "model"


def test_the_base_weights_teacher_needs_a_reference():
    assert arith_lm_config(credit=["opd"], teacher={"source": "self"}).algorithm.teacher.weights == "base"
    data = {"policy": {"family": "causal_lm", "model": "builtin:arith-lm", "reference": "none"},
            "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8}}}, "rewards": [{"fn": "exact_match"}],
            "algorithm": {"credit": ["opd"], "teacher": {"source": "self"}}}  # fmt: skip
    with pytest.raises(ConfigError, match=r"policy.reference = 'none'\); set policy.reference to 'auto'"):
        from_dict(TrainConfig, data)


@pytest.mark.parametrize(
    ("preset", "overrides", "message"),
    [
        (
            "demo_arith_dlm_espo.yaml",
            ["algorithm.teacher={source: model, model: 'builtin:arith-dlm'}"],
            "policy.family = 'diffusion_lm' to host 'model' teachers.*likelihood proxy",
        ),
        (
            "demo_shapes_flow_grpo.yaml",
            ["algorithm.teacher={source: self}"],
            "policy.family = 'flow' to host 'reference' and 'self' teachers.*denoising steps of latents",
        ),
        (
            "demo_shapes_vlm_grpo.yaml",
            ["algorithm.teacher={source: self, weights: current, context: ' {answer}'}"],
            "policy.family = 'vlm' to host 'context' teachers.*processor again",
        ),
        (
            "demo_shapes_vlm_grpo.yaml",
            ["algorithm.teacher={source: remote, remote: {url: 'http://127.0.0.1:9'}}"],
            "policy.family = 'vlm' to host 'remote' teachers.*images sent",
        ),
        (
            "demo_tool_calculator_grpo.yaml",
            ["algorithm.teacher={source: remote, remote: {url: 'http://127.0.0.1:9'}}"],
            "to host 'remote' teachers.*environment's tokens",
        ),
        (
            "demo_shapes_vlm_grpo.yaml",
            ["algorithm.teacher={source: self, weights: base}", "algorithm.credit=[full_distillation]"],
            "policy.family = 'vlm' to host 'distribution' teachers.*no VLM output head",
        ),
    ],
)
def test_families_refuse_the_teachers_they_cannot_score_and_say_why(preset, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(ROOT / "configs" / preset, ["algorithm.credit=[gated_distillation]", *overrides])


@pytest.mark.parametrize("preset", ["demo_shapes_vlm_grpo.yaml", "demo_tool_calculator_grpo.yaml"])
def test_vlm_and_multi_turn_policies_host_teacher_models(preset):
    config = load_config(ROOT / "configs" / preset, ["algorithm.credit=[opd]",
                                                     "algorithm.teacher={source: self, weights: base}"])  # fmt: skip
    assert config.algorithm.teacher.source == "self"
