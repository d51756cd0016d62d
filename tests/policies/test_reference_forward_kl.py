"""Terms against the reference's whole next-token distribution, computed in the chunked head pass: the per-token
forward KL (score feature ``ref_forward_kl``, TDPO [48]) and a regulariser's term (``ref_vocab_term``, RLPT [227]'s
mass on the reference's promising tokens). The chunked pass against plain autograd through full ``[n, V]`` softmaxes
(values and gradients, the reference's side constant), and through the causal LM policy with LoRA (reference =
adapters off) against the full logits of both models."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms.regularizers import bind_reference_vocab_term
from genalign.policies.base import ScoreRequest
from genalign.policies.lm.logprobs import (
    OtherModel,
    chunked_forward_kl,
    forward_kl_term,
    position_ids_from_mask,
    token_scores_from_hidden,
)
from tests.policies.test_causal_lm import PROMPTS, _lora_policy, make_policy, model_dirs  # noqa: F401  (fixture)


@pytest.mark.parametrize("chunk_size", [2, 16])
def test_the_chunked_forward_kl_equals_the_full_softmax_one_with_its_gradient(chunk_size):
    torch.manual_seed(0)
    head, other_head = torch.nn.Linear(6, 11).double(), torch.nn.Linear(5, 11, bias=False).double()
    hidden = torch.randn(7, 6, dtype=torch.float64, requires_grad=True)
    other_hidden = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(7, dtype=torch.float64)
    kl = chunked_forward_kl(hidden, other_hidden, head, other_head, temperature=0.7, chunk_size=chunk_size)
    (kl * weights).sum().backward()
    got = [hidden.grad.clone(), head.weight.grad.clone(), head.bias.grad.clone()]
    assert other_hidden.grad is None and other_head.weight.grad is None  # the reference is a constant
    hidden.grad = head.weight.grad = head.bias.grad = None
    own = (head(hidden) / 0.7).log_softmax(-1)  # [7, V]
    ref = (other_head(other_hidden) / 0.7).log_softmax(-1).detach()  # [7, V]
    naive = (ref.exp() * (ref - own)).sum(-1)  # [7]
    torch.testing.assert_close(kl.double(), naive, atol=1e-6, rtol=0)  # the head pass computes in float32
    (naive * weights).sum().backward()
    for a, b in zip(got, [hidden.grad, head.weight.grad, head.bias.grad], strict=True):
        torch.testing.assert_close(a.double(), b, atol=1e-6, rtol=0)  # the head pass computes in float32
    assert (kl > 0).all()


def test_padding_gets_no_forward_kl_and_the_token_scores_carry_it():
    torch.manual_seed(1)
    head = torch.nn.Linear(4, 9)
    hidden, other = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    scores = token_scores_from_hidden(hidden, torch.zeros(2, 3, dtype=torch.long), mask, head, temperature=1.0,
                                      chunk_size=2, reference=OtherModel(other, head, {"ref_forward_kl": forward_kl_term}))  # fmt: skip
    assert scores.ref_forward_kl.shape == (2, 3) and (scores.ref_forward_kl[mask == 0] == 0).all()
    same = token_scores_from_hidden(hidden, torch.zeros(2, 3, dtype=torch.long), mask, head, temperature=1.0,
                                    chunk_size=2, reference=OtherModel(hidden, head, {"ref_forward_kl": forward_kl_term}))  # fmt: skip
    torch.testing.assert_close(same.ref_forward_kl, torch.zeros(2, 3), atol=1e-6, rtol=0)  # KL(p ‖ p) = 0


def _full_log_probs(hf_model, data, temperature):
    ids = torch.cat([data["prompt_ids"], data["completion_ids"]], dim=1)
    attention = torch.cat([data["prompt_mask"], data["completion_mask"]], dim=1).long()
    logits = hf_model(input_ids=ids, attention_mask=attention, position_ids=position_ids_from_mask(attention),
                      use_cache=False).logits  # fmt: skip
    width = data["prompt_ids"].shape[1]
    return (logits[:, width - 1 : -1].float() / temperature).log_softmax(-1)  # [n, T, V]


def test_the_policy_compares_its_distribution_with_the_reference_at_every_action(model_dirs):  # noqa: F811
    policy = _lora_policy(model_dirs, logprob_chunk_size=4, temperature=0.8)
    assert "ref_forward_kl" in policy.capabilities.signals
    rollout = policy.rollout(PROMPTS, group_size=2)
    score = policy.score(rollout, ScoreRequest.of("ref_forward_kl", "ref_logp"))
    score["ref_forward_kl"].sum().backward()
    chunked = [p.grad.clone() for p in policy.trainable_parameters()]
    policy.model.zero_grad()
    data, mask = rollout.per_sample, rollout.action_mask
    own = _full_log_probs(policy.hf_model, data, 0.8)  # [n, T, V]
    with torch.no_grad(), policy.model.disable_adapter():
        ref = _full_log_probs(policy.hf_model, data, 0.8)
    naive = (ref.exp() * (ref - own)).sum(-1) * mask  # [n, T]
    torch.testing.assert_close(score["ref_forward_kl"], naive, atol=1e-5, rtol=1e-5)
    assert naive.sum() > 1e-3  # the adapters moved the policy off the reference
    gathered = ref.gather(2, data["completion_ids"][..., None]).squeeze(2) * mask
    torch.testing.assert_close(score["ref_logp"], gathered, atol=1e-5, rtol=1e-5)  # from the same reference pass
    naive.sum().backward()
    for a, b in zip(chunked, [p.grad for p in policy.trainable_parameters()], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert "ref_forward_kl" not in make_policy(model_dirs, reference="none").capabilities.signals


def test_the_policy_takes_a_regularisers_mass_over_the_references_promising_tokens(model_dirs):  # noqa: F811
    """``ref_vocab_term`` with RLPT's term: the policy's log-mass on the reference's top-3 tokens at each action,
    equal to the full-logits value with its gradient, and different from the mass on the policy's own top 3."""
    policy = _lora_policy(model_dirs, logprob_chunk_size=4, temperature=0.8)
    assert "ref_vocab_term" in policy.capabilities.signals
    term = bind_reference_vocab_term("reference_promising_tokens", top_k=3)
    rollout = policy.rollout(PROMPTS, group_size=2)
    score = policy.score(rollout, ScoreRequest.of(ref_vocab_term=term))
    score["ref_vocab_term"].sum().backward()
    chunked = [p.grad.clone() for p in policy.trainable_parameters()]
    policy.model.zero_grad()
    data, mask = rollout.per_sample, rollout.action_mask
    own = _full_log_probs(policy.hf_model, data, 0.8)  # [n, T, V]
    with torch.no_grad(), policy.model.disable_adapter():
        ref = _full_log_probs(policy.hf_model, data, 0.8)
    naive = own.gather(2, ref.topk(3, dim=-1).indices).logsumexp(-1) * mask  # [n, T]
    torch.testing.assert_close(score["ref_vocab_term"], naive, atol=1e-5, rtol=1e-5)
    own_set = own.gather(2, own.detach().topk(3, dim=-1).indices).logsumexp(-1) * mask
    assert not torch.allclose(naive, own_set, atol=1e-4), "the set is the reference's, not the policy's"
    naive.sum().backward()
    for a, b in zip(chunked, [p.grad for p in policy.trainable_parameters()], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
