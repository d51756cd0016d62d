"""VLM token credit (PEPO [129], VPPO [329]) and role-specific segment advantages (SD-GRPO [175]): hand-computed."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch, apply_credit
from genalign.algorithms.credit.vision import visual_dependency_scores

LN2 = math.log(2.0)


def test_visual_dependency_is_the_k3_kl_of_dropping_the_image_at_the_sampled_token():
    # d = exp(δ) − δ − 1 with δ = logπ(no image) − logπ(image): δ = 0 -> 0, 1 -> e − 2, −1 -> 1/e, ln 2 -> 1 − ln 2
    logp = torch.zeros(1, 4)
    without = torch.tensor([[0.0, 1.0, -1.0, LN2]])
    expected = torch.tensor([[0.0, math.e - 2.0, math.exp(-1.0), 1.0 - LN2]])
    torch.testing.assert_close(visual_dependency_scores(logp, without, torch.ones(1, 4)), expected)
    assert visual_dependency_scores(logp, torch.full((1, 4), 30.0), torch.ones(1, 4)).max() == 10.0  # capped


def _vppo_inputs(advantages: torch.Tensor) -> StepBatch:
    # row 0: δ = [0, 1, −1, ln 2] -> d = [0, 0.718282, 0.367879, 0.306853], mean S_0 = 0.348254
    # row 1: δ = [ln 2, 0, 0, pad] -> d = [0.306853, 0, 0], mean S_1 = 0.102284
    without = torch.tensor([[0.0, 1.0, -1.0, LN2], [LN2, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 1, 1, 0]])
    return StepBatch(
        sample_advantages=advantages,
        mask=mask,
        group_ids=torch.tensor([0, 0]),
        behaviour_logp=torch.zeros(2, 4),
        logp_without_image=without,
    )


def test_visual_dependency_trains_the_pivotal_tokens_and_reweights_trajectories():
    advantages = torch.tensor([1.0, -1.0])
    out = apply_credit([("visual_dependency", {"top_fraction": 0.5})], advantages, _vppo_inputs(advantages))
    # token filtering: keep ⌈0.5·4⌉ = 2 tokens of row 0 (d = 0.718, 0.368) and ⌈0.5·3⌉ = 2 of row 1 (0.307 and the
    # first of the tied zeros). Trajectory shaping: n = min-max of S = [1, 0], mean 0.5, α = 0.8 + n·0.2/0.5 = [1.2, 0.8]
    expected = torch.tensor([[0.0, 1.2, 1.2, 0.0], [-0.8, -0.8, 0.0, 0.0]])
    torch.testing.assert_close(out, expected)
    # the official default k = 0.2 keeps ⌈0.8⌉ = 1 token of row 0 and ⌈0.6⌉ = 1 of row 1
    default = apply_credit([("visual_dependency", {})], advantages, _vppo_inputs(advantages))
    torch.testing.assert_close(default, torch.tensor([[0.0, 1.2, 0.0, 0.0], [-0.8, 0.0, 0.0, 0.0]]))
    # both mechanisms off: every valid action keeps its advantage
    off_hp = {"top_fraction": 1.0, "min_scale": 1.0}
    off = apply_credit([("visual_dependency", off_hp)], advantages, _vppo_inputs(advantages))
    torch.testing.assert_close(off, torch.tensor([[1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, -1.0, 0.0]]))


def test_visual_dependency_needs_the_image_free_log_probs():
    inputs = StepBatch(
        sample_advantages=torch.ones(1),
        mask=torch.ones(1, 2),
        group_ids=torch.tensor([0]),
        behaviour_logp=torch.zeros(1, 2),
    )
    with pytest.raises(ValueError, match="logp_without_image"):
        apply_credit([("visual_dependency", {})], torch.ones(1), inputs)


def _pepo_inputs(progress: float) -> StepBatch:
    return StepBatch(
        sample_advantages=torch.tensor([2.0]),
        mask=torch.tensor([[1.0, 1.0, 1.0, 0.0]]),
        group_ids=torch.tensor([0]),
        visual_similarity=torch.tensor([[0.2, 0.5, 0.8, 0.0]]),
        entropy=torch.tensor([[1.0, 0.0, 0.5, 0.0]]),
        progress=progress,
    )


def test_perception_prior_weights_follow_image_similarity_gated_by_entropy():
    # v̂ = [0, .5, 1], Ĥ = [1, 0, .5]; v̂ + Ĥ = [1, .5, 1.5], centred [0, −.5, .5]; gate = 1 + 0.1·tanh(·)
    # = [1, 0.953788, 1.046212]; logits v·g/1.8 = [0.111111, 0.264941, 0.464983];
    # w = 3·softmax = [0.835453, 0.974383, 1.190164] (mean 1): the token most similar to the image gets most credit
    weights = torch.tensor([0.835453, 0.974383, 1.190164])
    full = apply_credit([("perception_prior", {})], torch.tensor([2.0]), _pepo_inputs(1.0))
    torch.testing.assert_close(full[0, :3], 2.0 * weights, atol=1e-5, rtol=0)
    assert full[0, 3] == 2.0  # padding keeps multiplier 1
    assert full[0, :3].mean().item() == pytest.approx(2.0)
    # phased in with progress p: multiplier (1 − p) + p·w
    half = apply_credit([("perception_prior", {})], torch.tensor([2.0]), _pepo_inputs(0.5))
    torch.testing.assert_close(half[0, :3], 2.0 * (0.5 + 0.5 * weights), atol=1e-5, rtol=0)
    start = apply_credit([("perception_prior", {})], torch.tensor([2.0]), _pepo_inputs(0.0))
    torch.testing.assert_close(start, torch.full((1, 4), 2.0))
    plain = apply_credit([("perception_prior", {"anneal": False})], torch.tensor([2.0]), _pepo_inputs(0.0))
    torch.testing.assert_close(plain, full)


def test_perception_prior_needs_the_visual_similarity():
    inputs = StepBatch(
        sample_advantages=torch.ones(1),
        mask=torch.ones(1, 2),
        group_ids=torch.tensor([0]),
        entropy=torch.ones(1, 2),
        progress=0.5,
    )
    with pytest.raises(ValueError, match="visual_similarity"):
        apply_credit([("perception_prior", {})], torch.ones(1), inputs)


def test_role_segments_credit_each_block_with_its_own_reward():
    # column 0: where-to-look reward [1, 0, 1, 0]; column 1: answer reward [1, 1, 0, 0]; one group of 4.
    # GRPO per column: mean .5, unbiased std √(1/3) -> z = ±0.866025
    rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    blocks = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1], [0, 0, 0, 0], [0, 0, 1, 2]])
    inputs = StepBatch(
        sample_advantages=torch.zeros(4),
        mask=torch.ones(4, 4),
        group_ids=torch.zeros(4, dtype=torch.long),
        rewards=rewards,
        block_ids=blocks,
    )
    out = apply_credit([("role_segments", {"eps": 0.0})], torch.zeros(4), inputs)
    z = math.sqrt(3.0) / 2.0
    expected = torch.tensor(
        [
            [z, z, z, z],  # both roles right
            [-z, z, z, z],  # a bad look, a right answer: only the looking tokens are blamed
            [z, z, z, z],  # never emitted the marker: all role 0 (a good look)
            [-z, -z, -z, -z],  # a second marker stays in the last role
        ]
    )
    torch.testing.assert_close(out, expected)
    # Dr. GRPO form: mean-centred only (±0.5); a role built from two columns sums them (col 0 + col 1)
    centred = apply_credit(
        [("role_segments", {"scale_by_std": False, "role_rewards": [[0, 1]]})], torch.zeros(4), inputs
    )
    torch.testing.assert_close(centred[:, 0], torch.tensor([1.0, 0.0, 0.0, -1.0]))
    assert CREDIT_RULES.meta("role_segments")["replaces"]
    with pytest.raises(ValueError, match="role_rewards"):
        apply_credit([("role_segments", {"role_rewards": [[0], [5]]})], torch.zeros(4), inputs)
