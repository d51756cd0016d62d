"""RLMEC [225] token rewards against hand-computed values: the generative reward model's probability of each token,
shifted by 0.5 and clipped to [0, 0.5] in correct samples and [-0.1, 0] in incorrect ones."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch, bind_option

F64 = torch.float64
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
GRM = torch.tensor([[0.9, 0.3, 0.55], [0.9, 0.45, 1.0]], dtype=F64)  # p_t of the sampled tokens


def rule(**hp):
    batch = StepBatch(mask=MASK, teacher_action_logp=GRM.log() * MASK, teacher_scored=torch.tensor([True, True]),
                      rewards=torch.tensor([[1.0], [0.0]]))  # sample 0 correct, sample 1 incorrect  # fmt: skip
    incoming = torch.tensor([[1.0], [-1.0]], dtype=F64).expand(2, 3).clone()
    return bind_option(CREDIT_RULES, "minimum_edit_reward", hp)(incoming, batch)


def test_correct_tokens_kept_by_the_rewrite_are_rewarded_and_edited_tokens_of_wrong_samples_penalised():
    out = rule(reward_weight=0.0)
    # correct: clip(p − .5, 0, .5) = (.4, 0, .05); incorrect: clip(p − .5, −.1, 0) = (0, −.05, padding 0)
    expected = torch.tensor([[0.4, 0.0, 0.05], [0.0, -0.05, 0.0]], dtype=F64)
    torch.testing.assert_close(out, expected)
    low = rule(reward_weight=1.0, coef=2.0, center=0.95)  # p − c: −.05, −.5 (clipped at −.1)
    torch.testing.assert_close(low[1], torch.tensor([-1.1, -1.2, -1.0], dtype=F64))


@pytest.mark.parametrize("hp", [{"center": 1.5}, {"incorrect_min": 0.1}, {"correct_max": -1.0}])
def test_bad_hyperparameters_are_refused(hp):
    with pytest.raises(ValueError):
        bind_option(CREDIT_RULES, "minimum_edit_reward", hp)
