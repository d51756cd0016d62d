"""T-REG [244] against hand-computed values: DPO's loss of a group pair plus the regulariser ``−log σ(β Σ_t w_t h_t)``
of each of its samples, with the self-generated token rewards ``w_t = tanh(ρ_t / 2)`` of the contrast between a good
and a bad instruction (the teacher's two passes); a sample the teacher did not score adds no regulariser."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import OBJECTIVES, ScoreOutput, StepBatch
from tests.algorithms.test_objectives_preference import aggregated, close, sigmoid, softplus

LOGP = [[-1.0, -2.0], [-2.0, -1.0]]
REF = [[-1.5, -1.5], [-1.0, -1.0]]  # h = (0.5, −0.5) and (−1, 0)
GOOD = [[-1.0, -3.0], [-1.0, -1.0]]
BAD = [[-2.0, -1.0], [-1.0, -1.0]]  # ρ = (1, −2) and (0, 0)


def t_reg(scored=(True, True), good=GOOD, **hp):
    logp = torch.tensor(LOGP, dtype=torch.float64, requires_grad=True)
    batch = StepBatch(
        mask=torch.ones(2, 2, dtype=torch.float64), group_ids=torch.tensor([0, 0]),
        combined_reward=torch.tensor([1.0, 0.0]), ref_logp=torch.tensor(REF, dtype=torch.float64),
        teacher_action_logp=torch.tensor(good, dtype=torch.float64),
        teacher_contrast_logp=torch.tensor(BAD, dtype=torch.float64), teacher_scored=torch.tensor(scored),
    )  # fmt: skip
    loss, metrics = OBJECTIVES.get("t_reg")(ScoreOutput(logp=logp), torch.zeros(2), batch, **hp)
    return logp, loss, metrics


def test_the_token_rewards_of_the_contrast_regularise_the_dpo_pair_loss():
    beta, reg = 0.5, 2.0
    logp, loss, metrics = t_reg(beta=beta, reg_coef=reg)
    w = [math.tanh(0.5), math.tanh(-1.0)]
    agreement = beta * (w[0] * 0.5 + w[1] * -0.5)  # R_w; R_l = 0 (the contrast is flat on the rejected sample)
    z = beta * (0.0 - (-1.0))
    expected = softplus(-z) + reg * 0.5 * (softplus(-agreement) + math.log(2))
    mask = torch.ones(2, 2, dtype=torch.float64)
    close(aggregated(loss, mask), expected)
    close(metrics["t_reg/regularizer"], (softplus(-agreement) + math.log(2)) / 2)
    close(metrics["t_reg/token_reward"], (w[0] + w[1]) / 4)
    aggregated(loss, mask).backward()
    # chosen: −σ(−z)β per token from DPO, −λ/2·σ(−R)·β·w_t from the regulariser; rejected: +σ(−z)β, w = 0
    close(logp.grad, [[-sigmoid(-z) * beta - reg / 2 * sigmoid(-agreement) * beta * w[0],
                       -sigmoid(-z) * beta - reg / 2 * sigmoid(-agreement) * beta * w[1]],
                      [sigmoid(-z) * beta, sigmoid(-z) * beta]])  # fmt: skip


def test_without_the_regulariser_or_the_teacher_it_is_dpo():
    plain = OBJECTIVES.get("group_dpo")(
        ScoreOutput(logp=torch.tensor(LOGP, dtype=torch.float64)), torch.zeros(2),
        StepBatch(mask=torch.ones(2, 2), group_ids=torch.tensor([0, 0]), combined_reward=torch.tensor([1.0, 0.0]),
                  ref_logp=torch.tensor(REF, dtype=torch.float64)), beta=0.5,
    )[0]  # fmt: skip
    close(t_reg(beta=0.5, reg_coef=0.0)[1], plain)
    _, unscored, metrics = t_reg(scored=(False, False), beta=0.5, reg_coef=3.0)
    close(unscored, plain)
    assert float(metrics["t_reg/regularizer"]) == 0.0


def test_the_regulariser_follows_the_sign_of_the_contrast():
    # the same sample with the good and bad instructions swapped: the token rewards flip, the gradient of the
    # regulariser pushes the other way
    flipped = [[-2.0, -1.0], [-1.0, -1.0]], [[-1.0, -3.0], [-1.0, -1.0]]
    grads = []
    for good, bad in ((GOOD, BAD), flipped):
        logp = torch.tensor(LOGP, dtype=torch.float64, requires_grad=True)
        batch = StepBatch(mask=torch.ones(2, 2, dtype=torch.float64), group_ids=torch.tensor([0, 0]),
                          combined_reward=torch.tensor([1.0, 0.0]), ref_logp=torch.tensor(REF, dtype=torch.float64),
                          teacher_action_logp=torch.tensor(good, dtype=torch.float64),
                          teacher_contrast_logp=torch.tensor(bad, dtype=torch.float64),
                          teacher_scored=torch.tensor([True, True]))  # fmt: skip
        no_dpo = OBJECTIVES.get("t_reg")(ScoreOutput(logp=logp), torch.zeros(2), batch, reg_coef=1.0)[0]
        with_dpo = OBJECTIVES.get("t_reg")(ScoreOutput(logp=logp), torch.zeros(2), batch, reg_coef=0.0)[0]
        (aggregated(no_dpo - with_dpo, torch.ones(2, 2))).backward()
        grads.append(logp.grad[0].clone())
    assert grads[0][0] < 0 < grads[0][1] and grads[1][0] > 0 > grads[1][1]


def test_a_negative_regulariser_weight_is_refused():
    with pytest.raises(ValueError, match=r"reg_coef=-1.0 must be >= 0"):
        t_reg(reg_coef=-1.0)
