"""Chunk-level ratios (Chunk-GRPO [70]) and weighted chunk sampling against hand values."""

import math

import pytest
import torch

from genalign.algorithms import RATIO_LEVELS, policy_loss
from genalign.algorithms.ratio_levels.chunks import chunk_ids, weighted_chunk_mask


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
