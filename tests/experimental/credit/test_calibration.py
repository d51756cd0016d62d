"""CAPO [57] (credit rule ``auc_calibrated``), hand-computed: logistic AUC-surrogate advantages over the (correct,
incorrect) pairs of a group, from the responses' confidences, with reference-model noise masking."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch, check_rule_order, compute_advantages

F64 = torch.float64
#: one group: 2 correct answers with mean token log-prob −1 and −3, 2 wrong ones with −2 and −0.5
CONFIDENCE = [-1.0, -3.0, -2.0, -0.5]
CORRECT = [1.0, 1.0, 0.0, 0.0]


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def credit(kl=None, rewards=CORRECT, groups=(0, 0, 0, 0), confidence=CONFIDENCE, **hp):
    logp = torch.tensor(confidence, dtype=F64)[:, None].expand(4, 2)  # two actions of equal log-prob each
    batch = StepBatch(mask=torch.ones(4, 2), group_ids=torch.tensor(groups), behaviour_logp=logp,
                      kl=torch.zeros(4, 2, dtype=F64) if kl is None else torch.tensor(kl, dtype=F64),
                      rewards=torch.tensor([[r] for r in rewards], dtype=F64))  # fmt: skip
    return CREDIT_RULES.get("auc_calibrated")(torch.zeros(4, 2, dtype=F64), batch, **hp)


def test_misranked_pairs_weigh_most():
    # w_ij = σ(s_j − s_i) over (i correct, j wrong): (0,2) σ(−1), (0,3) σ(0.5), (1,2) σ(1), (1,3) σ(2.5);
    # p = ½, n = 4 -> c = 2/(4·½) = 1
    out = credit(noise_margin=None)
    expected = [sigmoid(-1) + sigmoid(0.5), sigmoid(1) + sigmoid(2.5), -(sigmoid(-1) + sigmoid(1)),
                -(sigmoid(0.5) + sigmoid(2.5))]  # fmt: skip
    torch.testing.assert_close(out, torch.tensor(expected, dtype=F64)[:, None].expand(4, 2))
    assert out[1, 0] > out[0, 0]  # the less confident right answer is pushed up more
    assert out[3, 0] < out[2, 0]  # the over-confident wrong answer is pushed down more


def test_equal_confidences_give_the_grpo_advantage():
    out = credit(noise_margin=None, rewards=[1.0, 0.0, 0.0, 0.0], confidence=[-1.0] * 4)
    grpo = compute_advantages("grpo", torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64), torch.zeros(4, dtype=torch.long),
                              unbiased_std=False, eps=0.0)  # fmt: skip
    torch.testing.assert_close(out[:, 0], grpo)


def test_pairs_the_reference_ranks_far_the_wrong_way_are_masked():
    # reference confidences s − k1: sample 0's tokens have k1 = 2 -> s̄ = [−3, −3, −2, −0.5]; pairs with
    # s̄_j − s̄_i > 1 are dropped: (0,3) and (1,3) (2.5), kept: (0,2) and (1,2) (exactly 1)
    kl = [[2.0, 2.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    out = credit(kl=kl, noise_margin=1.0)
    expected = [sigmoid(-1), sigmoid(1), -(sigmoid(-1) + sigmoid(1)), 0.0]
    torch.testing.assert_close(out[:, 0], torch.tensor(expected, dtype=F64))


def test_groups_are_separate_and_one_sided_groups_get_nothing():
    out = credit(noise_margin=None, rewards=[1.0, 1.0, 0.0, 1.0], groups=(0, 0, 1, 1))
    # group 0 is all correct; group 1: (3 correct, 2 wrong) with s = −0.5, −2: w = σ(−1.5), p = ½, n = 2 -> c = 2
    torch.testing.assert_close(out[:, 0], torch.tensor([0.0, 0.0, -2 * sigmoid(-1.5), 2 * sigmoid(-1.5)], dtype=F64))


def test_the_rule_replaces_the_advantages_and_names_bad_arguments():
    assert CREDIT_RULES.meta("auc_calibrated")["needs"] == ("behaviour_logp", "kl", "rewards")
    with pytest.raises(ValueError, match="put it first"):
        check_rule_order(["entropy_weighted", "auc_calibrated"])
    with pytest.raises(ValueError, match="temperature > 0"):
        credit(temperature=0.0)
