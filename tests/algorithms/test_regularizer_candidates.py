"""SimKO [258] (regulariser ``topk_candidates``): the vocabulary term, the per-row entropy quantile, and the correction
that turns the token PPO loss into SimKO's (top-K spread for correct responses, λ on a wrong top-1 candidate), in value
and gradient against hand-computed numbers; accepted by the config loader on the causal LM."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import REGULARIZERS, bind_vocab_term, policy_loss
from genalign.algorithms.regularizers.candidates import row_quantile, topk_candidates_term
from tests.algorithms.arith_config import arith_lm_config
from tests.algorithms.regularizer_inputs import regularizer_inputs


def test_vocabulary_term_value_is_the_top1_log_prob_and_its_gradient_the_top_k_mean():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]], requires_grad=True)
    value = topk_candidates_term(logits, top_k=3)
    probs = torch.softmax(logits.detach(), -1)
    assert value.item() == pytest.approx(math.log(probs[0, 0].item()))
    value.sum().backward()
    # ∂/∂z_j mean_{k ≤ 3} log π_k = 1[j ∈ top 3]/3 − π_j
    expected = torch.tensor([[1 / 3, 1 / 3, 1 / 3, 0.0]]) - probs
    torch.testing.assert_close(logits.grad, expected)
    assert bind_vocab_term("topk_candidates", top_k=2)(torch.zeros(1, 2)).shape == (1,)


def test_row_quantile_matches_torch_quantile():
    values = torch.randn(3, 6)
    valid = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [0, 1, 1, 1, 1, 0]], dtype=torch.bool)
    expected = torch.stack([torch.quantile(values[i][valid[i]], 0.8) for i in range(3)])[:, None]
    torch.testing.assert_close(row_quantile(values, valid, 0.8), expected)


def simko(log_ratio: float = 0.0, top1_gap: float = 0.0, **hp):
    """Two responses of 2 tokens: row 0 correct (A = 1), row 1 incorrect (A = −1). Entropies [[1, 2], [3, 0.5]]: the
    0.8-quantiles are 1.8 and 2.5, so (0, 1) and (1, 0) are the high-entropy tokens."""
    old = torch.full((2, 2), math.log(0.5))
    logp = (old + log_ratio).requires_grad_(True)
    vocab = (logp.detach() + top1_gap).requires_grad_(True)  # the value: the top-1 log-prob
    advantages = torch.tensor([1.0, -1.0])
    inputs = regularizer_inputs(logp=logp, mask=torch.ones(2, 2), old_logp=old, advantages=advantages,
                               entropy=torch.tensor([[1.0, 2.0], [3.0, 0.5]]), vocab=vocab)  # fmt: skip
    correction = REGULARIZERS.get("topk_candidates")(*inputs, **hp)
    ppo, _ = policy_loss(logp, old, advantages, torch.ones(2, 2), eps_low=0.2, eps_high=0.2)
    (ppo + correction).sum().backward()
    return correction.detach(), logp.grad, vocab.grad


def test_correction_turns_ppo_into_simko():
    correction, grad_logp, grad_vocab = simko()
    # correct response, high-entropy token (0, 1): value unchanged; (1 − α) of the gradient on the sampled token,
    # α on the mean log-prob of the top-K candidates (α = 0.01)
    assert correction[0].tolist() == [0.0, 0.0]
    assert grad_logp[0].tolist() == pytest.approx([-1.0, -0.99]) and grad_vocab[0].tolist() == pytest.approx([0, -0.01])
    # incorrect response, high-entropy token (1, 0) whose sampled token is the top-1: advantage × λ = 1.1
    assert correction[1].tolist() == pytest.approx([0.1, 0.0])
    assert grad_logp[1].tolist() == pytest.approx([1.1, 1.0]) and grad_vocab[1].tolist() == [0.0, 0.0]


def test_no_extra_penalty_when_the_sampled_token_is_not_the_top1():
    correction, grad_logp, _ = simko(top1_gap=0.5)  # another token is more likely than the sampled one
    assert correction[1].tolist() == [0.0, 0.0] and grad_logp[1].tolist() == pytest.approx([1.0, 1.0])


def test_a_clipped_positive_token_gets_no_gradient():
    _, grad_logp, grad_vocab = simko(log_ratio=math.log(1.5))  # ρ = 1.5 > 1.2 for A > 0: PPO's clip holds
    assert grad_logp[0].tolist() == [0.0, 0.0] and grad_vocab[0].tolist() == [0.0, 0.0]


def test_config_accepts_simko_on_the_causal_lm():
    config = arith_lm_config(regularizer={"name": "topk_candidates", "top_k": 3, "mix_coef": 0.01})
    assert {"vocab_term", "entropy"} <= set(config.algorithm.needs())
    with pytest.raises(ValueError, match="negative_scale"):
        topk_candidates_term(torch.zeros(1, 4), negative_scale=0.5)
