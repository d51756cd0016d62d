"""Step-level credit for flow models against hand values: noise-aware step weights (TempFlow-GRPO [168]) and dense
step advantages from reward gains (DenseGRPO [148])."""

import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.algorithms.credit import dense_step_advantages, noise_aware_step_weights


def test_noise_aware_weights_are_proportional_to_std_with_mean_one_on_trained_steps():
    weights = noise_aware_step_weights(torch.tensor([3.0, 2.0, 1.0]), torch.tensor([[True, False, True]]))
    assert torch.allclose(weights, torch.tensor([[1.5, 0.0, 0.5]]))
    structure = dict(step_std=torch.tensor([[3.0, 2.0, 1.0]]))
    inputs = StepBatch(sample_advantages=torch.ones(1), mask=torch.tensor([[1.0, 0.0, 1.0]]), group_ids=torch.zeros(1, dtype=torch.long), **structure)  # fmt: skip
    advantages = CREDIT_RULES.get("noise_aware_steps")(torch.full((1, 3), -2.0), inputs)
    assert torch.allclose(advantages, torch.tensor([[-3.0, 0.0, -1.0]]))


def test_dense_step_advantages_normalise_reward_gains_per_step_within_groups():
    step_rewards = torch.tensor([[0.0, 1.0, 1.0], [0.0, 3.0, 2.0], [5.0, 5.0, 5.0], [5.0, 5.0, 7.0]])
    advantages = dense_step_advantages(step_rewards, torch.tensor([0, 0, 1, 1]), eps=0.0)
    # group 0 gains: [1, 0] and [3, -1]; group 1 gains: [0, 0] and [0, 2]
    expected = torch.tensor([[-1.0, 1.0], [1.0, -1.0], [float("nan"), -1.0], [float("nan"), 1.0]])
    assert torch.allclose(advantages[:, 1], expected[:, 1])
    assert torch.allclose(advantages[:2, 0], expected[:2, 0])
    assert torch.isnan(advantages[2:, 0]).all()  # eps=0 and zero spread: 0/0; the default eps gives 0
    assert torch.equal(dense_step_advantages(step_rewards, torch.tensor([0, 0, 1, 1]))[2:, 0], torch.zeros(2))


def test_dense_step_gains_rule_masks_untrained_steps_and_unknown_gains():
    step_rewards = torch.tensor([[0.0, 1.0, float("nan")], [0.0, 3.0, float("nan")]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    inputs = StepBatch(
        sample_advantages=torch.zeros(2), mask=mask, group_ids=torch.tensor([0, 0]), step_rewards=step_rewards
    )
    advantages = CREDIT_RULES.get("dense_step_gains")(torch.zeros(2, 2), inputs, eps=0.0)
    assert advantages.tolist() == [[-1.0, 0.0], [1.0, 0.0]]
