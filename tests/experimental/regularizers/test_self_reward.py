"""LaSeR [208] (regulariser ``last_token_self_reward``), hand-computed: the log-probability of a pre-specified token
where each completion ends, scaled around a reference constant, regressed onto the verifier's reward."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import REGULARIZERS, ScoreOutput, StepBatch, bind_vocab_term
from genalign.algorithms.scores import ScoreRequest

F64 = torch.float64
HP = {"token_id": 1, "reference_logp": -23.0, "beta": 0.1}


def test_the_vocabulary_term_is_the_log_probability_of_the_token():
    term = bind_vocab_term("last_token_self_reward", **HP)
    logits = torch.tensor([[0.0, math.log(3.0)], [2.0, 2.0]], dtype=F64)
    torch.testing.assert_close(term(logits), torch.tensor([math.log(3 / 4), math.log(1 / 2)], dtype=F64))
    assert torch.isnan(bind_vocab_term("last_token_self_reward", **{**HP, "token_id": 5})(logits)).all()
    assert ScoreRequest.of(vocab_term=term).param("vocab_term") is term


def test_the_mse_aligns_the_last_token_self_reward_with_the_verifier():
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=F64)
    vocab = torch.tensor([[-30.0, -25.0, -20.0], [-10.0, -13.0, 99.0]], dtype=F64, requires_grad=True)
    batch = StepBatch(mask=mask, rewards=torch.tensor([[1.0], [0.0]], dtype=F64))
    loss = REGULARIZERS.get("last_token_self_reward")(
        ScoreOutput(vocab * 0.0, {"vocab_term": vocab}), None, batch, **HP
    )
    # sample 0 ends at −20: s = 0.1·(−20 + 23) = 0.3, (0.3 − 1)² = 0.49; sample 1 ends at −13: s = 1.0, (1 − 0)² = 1
    torch.testing.assert_close(loss.detach(), torch.tensor([[0.49] * 3, [1.0, 1.0, 0.0]], dtype=F64))
    loss.sum().backward()
    # only the last action's log-prob gets gradient: 2·(s − r)·β per valid action carrying the loss
    torch.testing.assert_close(vocab.grad, torch.tensor([[0.0, 0.0, 3 * 2 * -0.7 * 0.1], [0.0, 2 * 2 * 1.0 * 0.1, 0.0]],
                                                        dtype=F64))  # fmt: skip


def test_a_missing_reward_adds_nothing_and_bad_settings_are_named():
    mask = torch.ones(2, 2, dtype=F64)
    vocab = torch.full((2, 2), -13.0, dtype=F64)
    batch = StepBatch(mask=mask, rewards=torch.tensor([[float("nan")], [1.0]], dtype=F64))
    loss = REGULARIZERS.get("last_token_self_reward")(ScoreOutput(vocab, {"vocab_term": vocab}), None, batch, **HP)
    torch.testing.assert_close(loss, torch.tensor([[0.0, 0.0], [0.0, 0.0]], dtype=F64))  # s = 1 = r for sample 1
    with pytest.raises(ValueError, match="token_id=None"):
        bind_vocab_term("last_token_self_reward")
    with pytest.raises(ValueError, match="reference_logp is required"):
        bind_vocab_term("last_token_self_reward", token_id=3)
    outside = torch.full((2, 2), float("nan"), dtype=F64)
    with pytest.raises(ValueError, match="token_id=1 is outside the policy's vocabulary"):
        REGULARIZERS.get("last_token_self_reward")(ScoreOutput(vocab, {"vocab_term": outside}), None, batch, **HP)
