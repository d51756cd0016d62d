"""Chunk-level ratios (Chunk-GRPO), weighted chunk sampling and DenseGRPO step advantages against hand values."""

import math

import pytest
import torch

from genalign.algorithms import RATIO_LEVELS, policy_loss
from genalign.algorithms.flow_credit import chunk_ids, dense_step_advantages, weighted_chunk_mask


def test_chunk_ids_from_size_and_boundaries():
    assert chunk_ids(5, chunk_size=2).tolist() == [0, 0, 1, 1, 2]
    assert chunk_ids(6, chunk_boundaries=[0, 1, 4]).tolist() == [0, 1, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="chunk_boundaries"):
        chunk_ids(6, chunk_boundaries=[1, 4])


def test_chunk_ratio_is_the_geometric_mean_of_step_ratios_per_chunk():
    assert "chunk" in RATIO_LEVELS.names()
    old = torch.zeros(1, 4)
    logp = torch.tensor([[0.1, 0.3, -0.2, 0.4]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # step 3 untrained: chunk 1 is step 2 alone
    loss, _ = policy_loss(
        logp, old, torch.ones(1), mask, ratio_level="chunk", clip="ppo", chunk_size=2, eps_low=0.5, eps_high=0.5
    )
    expected = -torch.tensor([[math.exp(0.2), math.exp(0.2), math.exp(-0.2), 0.0]])
    assert torch.allclose(loss, expected, atol=1e-6)
    loss.sum().backward()
    # both steps of chunk 0 carry -exp((l0 + l1) / 2); each term gives -exp(0.2) / 2 to each step: -exp(0.2) in all
    assert torch.allclose(logp.grad[0, :2], torch.full((2,), -math.exp(0.2)), atol=1e-6)
    assert logp.grad[0, 3] == 0


def test_chunk_ratio_is_clipped_once_per_chunk():
    old = torch.zeros(1, 2)
    logp = torch.tensor([[0.5, 0.1]], requires_grad=True)  # chunk ratio exp(0.3) > 1 + 0.2
    loss, _ = policy_loss(
        logp, old, torch.ones(1), torch.ones(1, 2), ratio_level="chunk", clip="ppo", chunk_size=2, eps_low=0.2,
        eps_high=0.2,
    )  # fmt: skip
    assert torch.allclose(loss, torch.full((1, 2), -1.2), atol=1e-6)


def test_weighted_chunk_mask_draws_only_chunks_with_weight():
    chunks = chunk_ids(6, chunk_size=2)
    mask = weighted_chunk_mask(chunks, [0.0, 1.0, 0.0], num_trained=1, generator=torch.Generator().manual_seed(0))
    assert mask.tolist() == [False, False, True, True, False, False]
    with pytest.raises(ValueError, match="weights"):
        weighted_chunk_mask(chunks, [1.0, 1.0], num_trained=1)


def test_dense_step_advantages_normalise_reward_gains_per_step_within_groups():
    step_rewards = torch.tensor([[0.0, 1.0, 1.0], [0.0, 3.0, 2.0], [5.0, 5.0, 5.0], [5.0, 5.0, 7.0]])
    advantages = dense_step_advantages(step_rewards, torch.tensor([0, 0, 1, 1]), eps=0.0)
    # group 0 gains: [1, 0] and [3, -1]; group 1 gains: [0, 0] and [0, 2]
    expected = torch.tensor([[-1.0, 1.0], [1.0, -1.0], [float("nan"), -1.0], [float("nan"), 1.0]])
    assert torch.allclose(advantages[:, 1], expected[:, 1])
    assert torch.allclose(advantages[:2, 0], expected[:2, 0])
    assert torch.isnan(advantages[2:, 0]).all()  # eps=0 and zero spread: 0/0; the default eps gives 0
    assert torch.equal(dense_step_advantages(step_rewards, torch.tensor([0, 0, 1, 1]))[2:, 0], torch.zeros(2))
