"""Teachers that write (``Teacher.write``): a teacher model continues given starts after the student's prompts, and
the log-probs it records are its own sampling log-probs (checked through the full logits, and unlike the student's); a
self-teacher writes after the prompt with its privileged context; a start that has ended gets nothing, a cap limits
the written tokens; the teacher stage of a teacher that only writes judges nothing and counts what it wrote."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.tiny import build_tiny_causal_lm
from genalign.teachers.build import build_teacher
from genalign.teachers.config import TeacherConfig
from genalign.teachers.stage import TeacherStage
from tests.teachers.test_local_teacher import full_logits

torch.set_num_threads(1)
ROWS = [{"prompt": "1 + 2 =", "answer": "3"}, {"prompt": "2 + 2 =", "answer": "4"}]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("writing_models")
    student = build_tiny_causal_lm(root / "student", architecture="qwen2", vocab_size=96, seed=0)
    teacher = build_tiny_causal_lm(root / "teacher", architecture="llama", vocab_size=96, seed=1)
    return student, teacher


@pytest.fixture(scope="module")
def policy(models):
    return build_policy(CausalLMPolicyConfig(model=str(models[0]), max_new_tokens=6, temperature=0.8))


def test_a_teacher_model_writes_after_the_start_with_its_own_sampling_logprobs(policy, models):
    from transformers import AutoModelForCausalLM

    teacher = build_teacher(TeacherConfig(source="model", model=str(models[1])), policy, batch_size=1)  # 2 calls
    starts = [[], [17, 18]]
    written = teacher.write(ROWS, starts, [None, 3])
    teacher_model = AutoModelForCausalLM.from_pretrained(str(models[1]))
    for row, start, (ids, logp), cap in zip(ROWS, starts, written, [6, 3], strict=True):
        assert 1 <= len(ids) <= min(cap, 6 - len(start)) and logp.shape == (len(ids),)
        # the teacher's log-probs of its tokens after [prompt | start], through the full logits at the temperature
        expected, _ = full_logits(teacher_model, row["prompt"], start + ids, policy.tokenizer, 0.8)
        torch.testing.assert_close(logp, expected[len(start) :], atol=1e-5, rtol=0)
        student, _ = full_logits(policy.hf_model, row["prompt"], start + ids, policy.tokenizer, 0.8)
        assert not torch.allclose(logp, student[len(start) :], atol=1e-3)  # not the student's
    eos = policy.eos_token_ids[0]
    assert teacher.write(ROWS[:1], [[5, eos]], [None])[0][0] == []  # a start that has ended is not continued


def test_a_self_teacher_writes_seeing_its_privileged_context(policy):
    teacher = build_teacher(TeacherConfig(source="self", weights="current", context=" the answer is {answer}"),
                            policy, batch_size=4)  # fmt: skip
    written = teacher.write(ROWS, [[], []], [None, None])
    for row, (ids, logp) in zip(ROWS, written, strict=True):
        hinted, _ = full_logits(policy.hf_model, row["prompt"] + f" the answer is {row['answer']}", ids,
                                policy.tokenizer, 0.8)  # fmt: skip
        plain, _ = full_logits(policy.hf_model, row["prompt"], ids, policy.tokenizer, 0.8)
        torch.testing.assert_close(logp, hinted, atol=1e-5, rtol=0)
        assert not torch.allclose(logp, plain, atol=1e-3)  # the context changed what the teacher wrote with


def test_a_base_weights_teacher_writes_with_the_reference_not_the_trained_weights(models):
    from transformers import AutoModelForCausalLM

    policy = build_policy(CausalLMPolicyConfig(model=str(models[0]), max_new_tokens=4, temperature=0.8))
    with torch.no_grad():
        for parameter in policy.model.parameters():
            parameter.add_(0.05)  # training moved the current weights
    written = build_teacher(TeacherConfig(source="self", weights="base"), policy, batch_size=4).write(
        ROWS, [[], []], [None, None]
    )
    base = AutoModelForCausalLM.from_pretrained(str(models[0]))
    for row, (ids, logp) in zip(ROWS, written, strict=True):
        expected, _ = full_logits(base, row["prompt"], ids, policy.tokenizer, 0.8)
        torch.testing.assert_close(logp, expected, atol=1e-5, rtol=0)


def test_a_teacher_that_only_writes_judges_nothing_and_counts_what_it_wrote(policy, models):
    config = TeacherConfig(source="model", model=str(models[1]))
    stage = TeacherStage.build(config, frozenset(), policy, batch_size=4, writes=True)
    assert not stage.judges
    assert stage.take_metrics(lambda counts: counts) == {"teacher/written_samples": 0.0, "teacher/written_tokens": 0.0}
    assert stage.judge(policy.rollout(ROWS, 1)) == {}
    written = stage.write(ROWS, [[], []], [2, 2])
    metrics = stage.take_metrics(lambda counts: counts)
    assert metrics == {"teacher/written_samples": 2.0, "teacher/written_tokens": float(sum(len(i) for i, _ in written))}
    assert all(len(ids) <= 2 for ids, _ in written)
