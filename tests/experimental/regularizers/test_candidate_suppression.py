"""TLPO's suppression of error-inducing candidates ([105], ``candidate_suppression``): the wrong-script candidates of
a vocabulary, the unlikelihood of their total mass, and the loss only at the positions a token judge marks."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import REGULARIZERS, StepBatch
from genalign.algorithms.regularizers.base import bind_vocab_term
from genalign.algorithms.scores import ScoreOutput
from genalign.experimental.regularizers.candidate_suppression import (
    off_script_tokens,
    suppression_term,
    vocabulary_off_script,
)

F64 = torch.float64


def test_off_script_candidates_of_a_vocabulary():
    texts = ["the", " мир", "42", "", "日本", "naïve", "x世"]
    flags = off_script_tokens(texts, ["LATIN"])
    assert flags.tolist() == [False, True, False, False, True, False, True]
    assert off_script_tokens(texts, ["LATIN", "CYRILLIC"]).tolist() == [False, False, False, False, True, False, True]
    assert not vocabulary_off_script("builtin:arith-lm", ("LATIN",)).any()  # digits and signs only


def test_the_term_is_the_unlikelihood_of_the_whole_off_script_mass():
    logits = torch.tensor([[0.0, 0.0, math.log(2.0)], [5.0, -5.0, 1.0]], dtype=F64, requires_grad=True)
    off = torch.tensor([False, False, True])
    term = suppression_term(logits, off)
    # row 0: π = (¼, ¼, ½), π(D) = ½ -> −log ½; row 1: −log(1 − π_2)
    p2 = math.exp(1.0) / (math.exp(5.0) + math.exp(-5.0) + math.exp(1.0))
    torch.testing.assert_close(term, torch.tensor([math.log(2.0), -math.log(1 - p2)], dtype=F64))
    term.sum().backward()
    assert logits.grad[0, 2] > 0 and logits.grad[0, 0] < 0  # descent lowers the off-script logit, raises the rest
    torch.testing.assert_close(suppression_term(logits, torch.tensor([False, False])), torch.zeros(2, dtype=F64))
    bound = bind_vocab_term("candidate_suppression", tokenizer="builtin:arith-lm", allowed_scripts=["LATIN"])
    torch.testing.assert_close(bound(logits.detach()), torch.zeros(2, dtype=F64))


def test_the_loss_applies_only_at_the_judged_errors():
    vocab = torch.tensor([[0.7, 0.2, 0.9], [0.4, 0.3, 0.0]], dtype=F64)
    score = ScoreOutput(torch.zeros(2, 3, dtype=F64), {"vocab_term": vocab})
    batch = StepBatch(mask=torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]),
                      token_judgement=torch.tensor([[0.0, -1.0, -5.0], [-1.0, 0.0, -1.0]]))  # fmt: skip
    loss = REGULARIZERS.get("candidate_suppression")(score, torch.zeros(2), batch, tokenizer="builtin:arith-lm",
                                                     allowed_scripts=["LATIN"])  # fmt: skip
    torch.testing.assert_close(loss, torch.tensor([[0.0, 0.2, 0.9], [0.4, 0.0, 0.0]], dtype=F64))
    with pytest.raises(ValueError, match="allowed_scripts=\\[\\] must name"):
        REGULARIZERS.get("candidate_suppression")(score, torch.zeros(2), batch, tokenizer="t", allowed_scripts=[])
