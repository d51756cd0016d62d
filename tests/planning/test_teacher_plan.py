"""genalign plan with a teacher: the teacher models' weights (whole on every GPU), the reference a base-weights
self-teacher needs, and the teacher's no-grad pass in its own phase, larger with the full-distribution pass."""

from __future__ import annotations

import os

from genalign.config import load_config
from genalign.planning import NO_OVERHEADS, plan_memory
from genalign.planning.report import format_plan

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DEMO = "configs/demo_arith_grpo.yaml"
MODEL_TEACHER = "algorithm.teacher={source: model, model: 'builtin:arith-lm'}"


def plan(*overrides):
    return plan_memory(load_config(DEMO, list(overrides)), gpus=1, gpu_memory_gb=80, overheads=NO_OVERHEADS)


def line(plan_, name: str) -> float:
    return sum(c.bytes for c in plan_.components if c.name == name)


def teacher_weights(plan_) -> float:
    return sum(c.bytes for c in plan_.components if c.name.startswith("frozen: teacher "))


def test_a_teacher_model_adds_its_weights_and_its_pass():
    opd = plan(MODEL_TEACHER, "algorithm.credit=[opd]")
    # the teacher is the demo model itself: as many float32 bytes as the policy's weights, on every GPU
    assert line(opd, "frozen: teacher model (builtin:arith-lm)") == line(opd, "weights") == 4 * opd.parameters.total
    assert line(opd, "teacher pass") > 0
    assert opd.total("teacher") == line(opd, "teacher pass") + sum(
        c.bytes for c in opd.components if c.phase == "resident"
    )
    assert "teacher peak" in format_plan(opd)


def test_the_full_distribution_pass_adds_hidden_states_and_chunk_buffers():
    opd = plan(MODEL_TEACHER, "algorithm.credit=[opd]")
    full = plan(MODEL_TEACHER, "algorithm.credit=[full_distillation]", "algorithm.teacher.distribution.chunk_size=64")
    extra = line(full, "teacher pass") - line(opd, "teacher pass")
    # demo model: hidden 64, vocabulary 18, float32; 2 models x micro-batch x completion x 64 x 4 + 2 x 4 x 64 x 18 x 4
    config = load_config(DEMO)
    batch, completion = config.algorithm.micro_batch_size, config.policy.max_new_tokens
    from genalign.planning.model_specs import resolve_model_spec

    text = resolve_model_spec("builtin:arith-lm").components["model"].config
    expected = 2 * batch * completion * text["hidden_size"] * 4 + 2 * 4 * 64 * text["vocab_size"] * 4
    assert extra == expected


def test_a_base_weights_self_teacher_loads_the_reference_and_routing_loads_every_expert():
    base = plan("algorithm.teacher={source: self, weights: base, context: ' {answer}'}", "algorithm.credit=[opd]")
    assert line(base, "reference policy") == line(base, "weights")
    experts = "{column: operator, experts: {'+': 'builtin:arith-lm', '-': 'builtin:arith-lm'}}"
    routed = plan(f"algorithm.teacher={{source: model, routing: {experts}}}", "algorithm.credit=[opd]")
    assert teacher_weights(routed) == 2 * line(routed, "weights")
