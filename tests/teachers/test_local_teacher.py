"""Teachers that run in the process, against direct computations through the full logits: a teacher model's
per-token log-probs and entropy of the student's sampled tokens, the OPD advantage they give (the hand-computed
per-token reverse KL of a tiny teacher and student), a self-teacher that sees the reference answer (and a wrong one
for the contrast), the base weights as the teacher, and the same-tokenizer check."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch, bind_option
from genalign.policies.base import Rollout
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.logprobs import position_ids_from_mask
from genalign.policies.lm.tiny import build_tiny_causal_lm
from genalign.teachers.build import build_teacher
from genalign.teachers.config import TeacherConfig
from genalign.teachers.vocabulary import VocabularyMismatch

torch.set_num_threads(1)
ALL = frozenset({"teacher_scored", "teacher_action_logp", "teacher_entropy", "teacher_contrast_logp"})
ROWS = [{"prompt": "1 + 2 =", "answer": "3"}, {"prompt": "2 + 2 =", "answer": "4"}]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("teacher_models")
    student = build_tiny_causal_lm(root / "student", architecture="qwen2", vocab_size=96, seed=0)
    teacher = build_tiny_causal_lm(root / "teacher", architecture="llama", vocab_size=96, seed=1)
    return student, teacher


@pytest.fixture(scope="module")
def policy(models):
    return build_policy(CausalLMPolicyConfig(model=str(models[0]), max_new_tokens=5, temperature=0.8))


@pytest.fixture(scope="module")
def rollout(policy) -> Rollout:
    torch.manual_seed(0)
    return policy.rollout(ROWS, 3)


def full_logits(model, prompt: str, completion: list[int], tokenizer, temperature: float):
    """Log-probs and entropies ``[L]`` of ``completion`` after ``prompt`` through the full ``[1, P + L, V]`` logits."""
    context = tokenizer.encode(prompt)
    ids = torch.tensor([context + completion])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits
    logp = (logits[0, len(context) - 1 : -1].float() / temperature).log_softmax(-1)  # [L, V]
    return logp.gather(1, torch.tensor(completion)[:, None]).squeeze(1), -(logp.exp() * logp).sum(-1)


def sampled(rollout: Rollout, i: int) -> list[int]:
    return rollout.per_sample["completion_ids"][i][rollout.action_mask[i] > 0].tolist()


def test_teacher_model_gives_the_opd_advantage_of_the_hand_computed_per_token_reverse_kl(policy, models, rollout):
    teacher = build_teacher(TeacherConfig(source="model", model=str(models[1])), policy, batch_size=4)
    values = teacher.judge(rollout, ALL - {"teacher_contrast_logp"})
    assert values["teacher_scored"].all()
    from transformers import AutoModelForCausalLM

    teacher_model, student_model = AutoModelForCausalLM.from_pretrained(str(models[1])), policy.hf_model
    advantages = bind_option(CREDIT_RULES, "opd", {"reward_weight": 0.0})(
        torch.zeros(rollout.action_mask.shape),
        StepBatch(mask=rollout.action_mask, behaviour_logp=rollout.old_logp, progress=0.0, **values,
                  rewards=torch.zeros(len(rollout), 1)),
    )  # fmt: skip
    for i, row in enumerate(rollout.rows):
        tokens, length = sampled(rollout, i), int(rollout.action_mask[i].sum())
        teacher_logp, teacher_entropy = full_logits(teacher_model, row["prompt"], tokens, policy.tokenizer, 0.8)
        student_logp, _ = full_logits(student_model, row["prompt"], tokens, policy.tokenizer, 0.8)
        torch.testing.assert_close(values["teacher_action_logp"][i, :length], teacher_logp, atol=1e-5, rtol=0)
        torch.testing.assert_close(values["teacher_entropy"][i, :length], teacher_entropy, atol=1e-5, rtol=0)
        # A_t = −(log π_S − log π_T): the per-token reverse KL of the student's own token, by hand
        torch.testing.assert_close(advantages[i, :length], teacher_logp - student_logp, atol=1e-4, rtol=0)
        assert not advantages[i, length:].any()


def test_teacher_passes_do_not_depend_on_how_the_batch_is_split(policy, models, rollout):
    config = TeacherConfig(source="model", model=str(models[1]))
    whole = build_teacher(config, policy, batch_size=len(rollout)).judge(rollout, ALL - {"teacher_contrast_logp"})
    single = build_teacher(config, policy, batch_size=1).judge(rollout, ALL - {"teacher_contrast_logp"})
    for name, value in whole.items():
        torch.testing.assert_close(single[name], value, atol=1e-6, rtol=0)


def test_self_teacher_sees_the_reference_answer_and_a_wrong_one_for_the_contrast(policy, rollout):
    config = TeacherConfig(source="self", weights="current", context=" the answer is {answer}",
                           contrast_context=" the answer is {other.answer}")  # fmt: skip
    teacher = build_teacher(config, policy, batch_size=2)
    values = teacher.judge(rollout, ALL)
    for i, row in enumerate(rollout.rows):
        other = "4" if row["answer"] == "3" else "3"  # the other prompt's answer: the wrong hint
        tokens, length = sampled(rollout, i), int(rollout.action_mask[i].sum())
        hinted, _ = full_logits(policy.hf_model, row["prompt"] + f" the answer is {row['answer']}", tokens,
                                policy.tokenizer, 0.8)  # fmt: skip
        wrong, _ = full_logits(policy.hf_model, row["prompt"] + f" the answer is {other}", tokens, policy.tokenizer,
                               0.8)  # fmt: skip
        torch.testing.assert_close(values["teacher_action_logp"][i, :length], hinted, atol=1e-5, rtol=0)
        torch.testing.assert_close(values["teacher_contrast_logp"][i, :length], wrong, atol=1e-5, rtol=0)
    assert teacher.take_metrics() == {"teacher/contrast_unavailable": 0.0}
    same = [dict(row, answer="3") for row in rollout.rows]  # every prompt shares the answer: no wrong hint
    teacher.judge(Rollout(**{**rollout.__dict__, "rows": same}), ALL)
    assert teacher.take_metrics() == {"teacher/contrast_unavailable": float(len(rollout))}


def test_self_teacher_base_weights_are_the_reference_not_the_trained_weights(models):
    policy = build_policy(CausalLMPolicyConfig(model=str(models[0]), max_new_tokens=4))
    torch.manual_seed(1)
    rollout = policy.rollout(ROWS, 2)
    teacher = build_teacher(TeacherConfig(source="self", weights="base"), policy, batch_size=4)
    before = teacher.judge(rollout, frozenset({"teacher_action_logp", "teacher_scored"}))["teacher_action_logp"]
    torch.testing.assert_close(before, policy.reference_logprobs(rollout), atol=0, rtol=0)
    with torch.no_grad():
        for parameter in policy.model.parameters():
            parameter.add_(0.05)  # training moves the current weights, never the base ones
    after = teacher.judge(rollout, frozenset({"teacher_action_logp", "teacher_scored"}))["teacher_action_logp"]
    torch.testing.assert_close(after, before, atol=0, rtol=0)
    assert not torch.allclose(policy.score(rollout).logp.detach(), before)


def test_a_teacher_with_another_tokenizer_is_refused_before_training(tmp_path, policy):
    other = build_tiny_causal_lm(tmp_path / "other", vocab_size=97)  # one more token: w<last>
    with pytest.raises(VocabularyMismatch, match=r"full token -> id maps.*does not map tokens between tokenizers"):
        build_teacher(TeacherConfig(source="model", model=str(other)), policy, batch_size=4)
    arith = build_policy(CausalLMPolicyConfig(model="builtin:arith-lm", max_new_tokens=4))
    with pytest.raises(VocabularyMismatch, match=r"'\*': 15 vs None"):  # chain-lm has no '*' (and other ids)
        build_teacher(TeacherConfig(source="model", model="builtin:chain-lm"), arith, batch_size=4)


def test_a_self_teacher_makes_as_many_passes_as_the_busiest_process(policy, rollout):
    """Sharded modules gather their parameters in every pass: each process pads to the busiest one's count."""
    teacher = build_teacher(TeacherConfig(source="self", weights="current", context=" {answer}"), policy, batch_size=4)
    assert teacher.shares_policy_modules
    passes, run = [], teacher.run
    teacher.run = lambda fn: passes.append(1) or run(fn)
    values = teacher.judge(rollout, frozenset({"teacher_action_logp"}), passes_everywhere=lambda n: n + 3)
    assert len(passes) == 2 + 3  # 6 samples in passes of 4, and 3 passes whose results are discarded
    assert values["teacher_action_logp"].shape == rollout.action_mask.shape
