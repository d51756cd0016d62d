"""RL with promising tokens [227] as the regulariser ``promising_tokens``: with the objective's ``−A·log π(o)``, the
correction ``A·log Z_S`` gives the gradient of the policy renormalised over its top tokens (no gradient to the tail);
hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import REGULARIZERS
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.scores import ScoreOutput
from genalign.experimental.regularizers.promising import promising_mass_term, reference_promising_mass_term
from tests.algorithms.regularizer_inputs import regularizer_inputs

F64 = torch.float64


def t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def test_the_correction_turns_the_policy_gradient_into_that_of_the_renormalised_policy():
    logits = t([[0.5, 0.3, 0.15, 0.05]]).log().requires_grad_(True)  # one action, V = 4
    log_mass = promising_mass_term(logits, top_k=2)  # S = the two most likely tokens, Z_S = 0.8
    torch.testing.assert_close(log_mass.detach(), t([math.log(0.8)]))
    advantage, sampled = 1.0, 0
    log_p = torch.log_softmax(logits, -1)[0, sampled]
    (grad,) = torch.autograd.grad(-advantage * log_p + advantage * log_mass.sum(), logits)
    # −A·∇log π_S(o) with π_S = (0.625, 0.375, 0, 0): −(e_0 − π_S); the tail (tokens 2, 3) gets no gradient
    torch.testing.assert_close(grad, t([[-0.375, 0.375, 0.0, 0.0]]))
    (plain,) = torch.autograd.grad(-advantage * torch.log_softmax(logits, -1)[0, sampled], logits)
    torch.testing.assert_close(plain, t([[-0.5, 0.3, 0.15, 0.05]]))  # without it the tail is pushed down


def test_the_promising_set_is_the_top_k_cut_to_a_nucleus():
    logits = t([[0.5, 0.3, 0.15, 0.05]]).log()
    torch.testing.assert_close(promising_mass_term(logits, top_k=3, top_p=0.7), t([math.log(0.8)]))  # 0.5 + 0.3
    torch.testing.assert_close(promising_mass_term(logits, top_k=3, top_p=0.5), t([math.log(0.5)]))  # the top one
    torch.testing.assert_close(promising_mass_term(logits, top_k=10), t([0.0]), atol=1e-12, rtol=0)  # all of V
    with pytest.raises(ValueError, match="top_k >= 1"):
        promising_mass_term(logits, top_k=0)


def test_the_regulariser_multiplies_the_advantage_and_zeroes_padding():
    assert REGULARIZERS.meta("promising_tokens")["needs"] == ("vocab_term",)
    vocab = t([[-0.2, -0.5], [-0.1, -3.0]]).requires_grad_(True)
    inputs = regularizer_inputs(
        logp=t([[0.0, 0.0], [0.0, 0.0]]), mask=torch.tensor([[1, 1], [1, 0]]), vocab=vocab, advantages=t([2.0, -1.0])
    )
    loss = REGULARIZERS.get("promising_tokens")(*inputs)
    torch.testing.assert_close(loss.detach(), t([[-0.4, -1.0], [0.1, 0.0]]))
    (grad,) = torch.autograd.grad(loss.sum(), vocab)
    torch.testing.assert_close(grad, t([[2.0, 2.0], [-1.0, 0.0]]))


def test_the_reference_promising_set_comes_from_the_reference_not_the_policy():
    """[227] from the base model's priors: the policy (0.5, 0.3, 0.15, 0.05) renormalised over the reference's two
    most likely tokens (2 and 3 here): Z_S = 0.15 + 0.05 = 0.2, while the policy's own top two give 0.8."""
    log_probs = t([[0.5, 0.3, 0.15, 0.05]]).log().requires_grad_(True)
    ref = t([[0.1, 0.2, 0.3, 0.4]]).log()
    log_mass = reference_promising_mass_term(log_probs, ref, top_k=2)
    torch.testing.assert_close(log_mass.detach(), t([math.log(0.2)]))
    torch.testing.assert_close(promising_mass_term(log_probs.detach(), top_k=2), t([math.log(0.8)]))
    (grad,) = torch.autograd.grad(log_mass.sum(), log_probs)
    torch.testing.assert_close(grad, t([[0.0, 0.0, 0.75, 0.25]]))  # only the reference's set moves: π_S = (0.75, 0.25)
    nucleus = reference_promising_mass_term(log_probs.detach(), ref, top_k=3, top_p=0.5)  # 0.4 < 0.5 <= 0.4 + 0.3
    torch.testing.assert_close(nucleus, t([math.log(0.2)]))
    with pytest.raises(ValueError, match="top_k >= 1"):
        reference_promising_mass_term(log_probs, ref, top_k=0)


def test_the_reference_regulariser_reads_its_own_feature():
    assert REGULARIZERS.meta("reference_promising_tokens")["needs"] == ("ref_vocab_term",)
    term = t([[-0.2, -0.5], [-0.1, -3.0]])
    score = ScoreOutput(t([[0.0, 0.0], [0.0, 0.0]]), {"ref_vocab_term": term})
    batch = StepBatch(mask=torch.tensor([[1, 1], [1, 0]]))
    loss = REGULARIZERS.get("reference_promising_tokens")(score, t([2.0, -1.0]), batch)
    torch.testing.assert_close(loss, t([[-0.4, -1.0], [0.1, 0.0]]))
    with pytest.raises(ValueError, match="ref_vocab_term"):
        REGULARIZERS.get("reference_promising_tokens")(
            ScoreOutput(t([[0.0]]), {}), t([1.0]), StepBatch(mask=torch.ones(1, 1))
        )
