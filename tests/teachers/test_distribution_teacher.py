"""The full-distribution teacher pass: per-token KL over the vocabulary between the student and the teacher (COPSD
[107]), and the teacher extrapolated away from an anchor (AlignDistil [85]), against hand-computed values and the full
``[1, L, V]`` logits of tiny models."""

from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.logprobs import position_ids_from_mask
from genalign.policies.lm.tiny import build_tiny_causal_lm
from genalign.teachers.build import build_teacher
from genalign.teachers.config import RemoteTeacherOptions, TeacherConfig
from genalign.teachers.distribution import compare_chunk
from genalign.teachers.distribution_options import DistributionOptions

torch.set_num_threads(1)
ROWS = [{"prompt": "1 + 2 =", "answer": "3"}, {"prompt": "2 + 2 =", "answer": "4"}]
VOCAB = frozenset({"teacher_scored", "teacher_action_logp", "teacher_vocab_reverse_kl", "teacher_vocab_forward_kl"})


def test_chunk_divergences_are_the_hand_computed_kls():
    # student p = (1/2, 1/4, 1/4), teacher q = (1/4, 1/4, 1/2), as log-probs (logits up to a constant)
    p, q = torch.tensor([[0.5, 0.25, 0.25]]), torch.tensor([[0.25, 0.25, 0.5]])
    out = compare_chunk(p.log() + 3.0, q.log() - 1.0, q.log()[:, 2])
    half = 0.5 * math.log(2)  # KL(p‖q) = ½ln2 + 0 + ¼ln½ = ¼ln2; KL(q‖p) = ¼ln½ + 0 + ½ln2 = ¼ln2
    torch.testing.assert_close(out.reverse_kl, torch.tensor([half / 2]))
    torch.testing.assert_close(out.forward_kl, torch.tensor([half / 2]))
    torch.testing.assert_close(out.target_logp, torch.tensor([math.log(0.5)]))
    torch.testing.assert_close(out.entropy, torch.tensor([1.5 * math.log(2)]))
    # asymmetric case: p = (0.9, 0.1), q = (0.5, 0.5)
    p, q = torch.tensor([[0.9, 0.1]]), torch.tensor([[0.5, 0.5]])
    out = compare_chunk(p.log(), q.log(), q.log()[:, 0])
    reverse = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)
    forward = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    torch.testing.assert_close(out.reverse_kl, torch.tensor([reverse]))
    torch.testing.assert_close(out.forward_kl, torch.tensor([forward]))


def test_extrapolated_teacher_is_the_token_adaptive_logit_mix():
    # teacher logits s_T = (1, 0), anchor s_A = (0, 0): π_T = (e/(1+e), 1/(1+e)), π_A = (1/2, 1/2)
    teacher, anchor = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0]])
    pt = math.e / (1 + math.e)
    tv = 2 * abs(pt - 0.5)  # Σ_v |π_T − π_A|
    weight = 2.0 * tv + 1e-3  # β₂ = 2
    mixed = torch.tensor([[1.0 + weight, 0.0]])  # s_T + w (s_T − s_A)
    options = DistributionOptions(anchor="reference", extrapolation=2.0, adaptive=True)
    student = torch.tensor([[0.3, -0.2]])
    out = compare_chunk(student, teacher, teacher.log_softmax(-1)[:, 1], anchor, anchor.log_softmax(-1)[:, 1],
                        options=options)  # fmt: skip
    torch.testing.assert_close(out.weight, torch.tensor([weight]))
    target = mixed.log_softmax(-1)
    torch.testing.assert_close(out.target_logp, target[:, 1])  # without the token ids: from the two log-probs
    s = student.log_softmax(-1)
    torch.testing.assert_close(out.reverse_kl, (s.exp() * (s - target)).sum(-1))
    fixed = compare_chunk(student, teacher, teacher.log_softmax(-1)[:, 1], anchor, anchor.log_softmax(-1)[:, 1],
                          options=DistributionOptions(anchor="reference", extrapolation=2.0, adaptive=False))  # fmt: skip
    torch.testing.assert_close(fixed.weight, torch.tensor([2.0]))
    torch.testing.assert_close(fixed.target_logp, torch.tensor([[3.0, 0.0]]).log_softmax(-1)[:, 1])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("distribution_models")
    student = build_tiny_causal_lm(root / "student", architecture="qwen2", vocab_size=96, seed=0)
    teacher = build_tiny_causal_lm(root / "teacher", architecture="llama", vocab_size=96, seed=1)
    return student, teacher


@pytest.fixture(scope="module")
def policy(models):
    return build_policy(CausalLMPolicyConfig(model=str(models[0]), max_new_tokens=5, temperature=0.8))


@pytest.fixture(scope="module")
def rollout(policy):
    torch.manual_seed(0)
    return policy.rollout(ROWS, 2)


def full_logp(model, prompt: str, completion: list[int], tokenizer) -> torch.Tensor:
    """``[L, V]`` next-token log-probs at temperature 0.8 for each completion token, through the full logits."""
    context = tokenizer.encode(prompt)
    ids = torch.tensor([context + completion])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits
    return (logits[0, len(context) - 1 : -1].float() / 0.8).log_softmax(-1)


def test_teacher_model_vocabulary_kls_match_the_full_logits(policy, models, rollout):
    config = TeacherConfig(source="model", model=str(models[1]), distribution=DistributionOptions(chunk_size=3))
    values = build_teacher(config, policy, batch_size=3).judge(rollout, VOCAB)
    from transformers import AutoModelForCausalLM

    teacher_model = AutoModelForCausalLM.from_pretrained(str(models[1]))
    for i, row in enumerate(rollout.rows):
        keep = rollout.action_mask[i] > 0
        tokens = rollout.per_sample["completion_ids"][i][keep].tolist()
        s = full_logp(policy.hf_model, row["prompt"], tokens, policy.tokenizer)  # [L, V]
        t = full_logp(teacher_model, row["prompt"], tokens, policy.tokenizer)
        length = len(tokens)
        torch.testing.assert_close(values["teacher_vocab_reverse_kl"][i, :length], (s.exp() * (s - t)).sum(-1),
                                   atol=1e-5, rtol=1e-4)  # fmt: skip
        torch.testing.assert_close(values["teacher_vocab_forward_kl"][i, :length], (t.exp() * (t - s)).sum(-1),
                                   atol=1e-5, rtol=1e-4)  # fmt: skip
        torch.testing.assert_close(values["teacher_action_logp"][i, :length],
                                   t.gather(1, torch.tensor(tokens)[:, None]).squeeze(1), atol=1e-5, rtol=0)  # fmt: skip
        assert (values["teacher_vocab_reverse_kl"][i, length:] == 0).all()


def test_self_teacher_with_context_extrapolated_from_the_reference(policy, rollout):
    options = DistributionOptions(anchor="reference", extrapolation=0.5)
    config = TeacherConfig(source="self", weights="current", context="\nAnswer: {answer}\n", distribution=options)
    wanted = VOCAB | {"teacher_anchor_logp", "teacher_extrapolation"}
    values = build_teacher(config, policy, batch_size=4).judge(rollout, wanted)
    model = policy.hf_model
    for i, row in enumerate(rollout.rows):
        keep = rollout.action_mask[i] > 0
        tokens = rollout.per_sample["completion_ids"][i][keep].tolist()
        hinted = full_logp(model, row["prompt"] + "\nAnswer: " + row["answer"] + "\n", tokens, policy.tokenizer)
        # the reference of an untrained full-weight policy is the same weights: w_t = 0.5·0 + 1e-3
        length = len(tokens)
        torch.testing.assert_close(values["teacher_extrapolation"][i, :length], torch.full((length,), 1e-3))
        index = torch.tensor(tokens)[:, None]
        torch.testing.assert_close(values["teacher_anchor_logp"][i, :length], hinted.gather(1, index).squeeze(1),
                                   atol=1e-5, rtol=0)  # fmt: skip
        s = full_logp(model, row["prompt"], tokens, policy.tokenizer)
        torch.testing.assert_close(values["teacher_vocab_reverse_kl"][i, :length], (s.exp() * (s - hinted)).sum(-1),
                                   atol=1e-4, rtol=1e-3)  # fmt: skip


def test_distribution_options_are_checked_at_config_load():
    with pytest.raises(ValueError, match=r"needs distribution\.anchor"):
        TeacherConfig(source="self", distribution=DistributionOptions(extrapolation=1.0)).validate()
    with pytest.raises(ValueError, match="needs a local teacher"):
        remote = RemoteTeacherOptions(url="http://localhost:1/score")
        TeacherConfig(source="remote", remote=remote, distribution=DistributionOptions(anchor="reference")).validate()
    config = TeacherConfig(source="self", distribution=DistributionOptions(anchor="reference", extrapolation=1.0))
    assert {"teacher_anchor_logp", "teacher_extrapolation", "teacher_vocab_reverse_kl"} <= config.supplies()
    assert "distribution" in config.kinds()
