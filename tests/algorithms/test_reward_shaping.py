"""Reward shaping catalogue: Miner [28], OREAL [147], DRA [167], PAPO [320], with hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import (
    REWARD_COMBINERS,
    REWARD_SHAPERS,
    StepBatch,
    aggregate,
    apply_credit,
    apply_reward_shaping,
    compute_advantages,
    loss_normalizer,
)

# ------------------------------------------------------------------------------------------------ PAPO [320]


def test_outcome_process_normalises_the_process_reward_among_correct_answers_only():
    # one group: outcome [1, 1, 1, 0] -> mean .75, unbiased std .5 -> A_out = [.5, .5, .5, −1.5];
    # process among the correct ones [.9, .5, .1] -> mean .5, std .4 -> A_proc = [1, 0, −1, 0] (the wrong answer's
    # process score .95 is never compared)
    rewards = torch.tensor([[1.0, 0.9], [1.0, 0.5], [1.0, 0.1], [0.0, 0.95]])
    group = torch.zeros(4, dtype=torch.long)
    combine = REWARD_COMBINERS.get("outcome_process")
    combined, stats = combine(rewards, group, [1.0, 1.0], eps=0.0)
    torch.testing.assert_close(combined, torch.tensor([1.5, 0.5, -0.5, -1.5]))
    assert stats["process/frac_correct"] == 0.75
    # the process weight scales A_proc only
    heavier, _ = combine(rewards, group, [1.0, 2.0], eps=0.0)
    torch.testing.assert_close(heavier, torch.tensor([2.5, 0.5, -1.5, -1.5]))
    # the result is a centred advantage: the dr_grpo estimator keeps it
    torch.testing.assert_close(compute_advantages("dr_grpo", combined, group), combined)


def test_outcome_process_keeps_a_signal_in_uniformly_correct_groups_and_skips_missing():
    rewards = torch.tensor([[1.0, 0.8], [1.0, 0.2], [0.0, 0.3], [float("nan"), 0.9]])
    combined, _ = REWARD_COMBINERS.get("outcome_process")(rewards, torch.tensor([0, 0, 1, 1]), [1.0, 1.0], eps=0.0)
    # group 0 all correct: A_out = 0, A_proc = ±0.3 / √(0.18) = ±0.707107; group 1: one outcome missing -> no baseline
    torch.testing.assert_close(combined[:2], torch.tensor([1.0, -1.0]) / math.sqrt(2.0))
    assert combined[2] == 0.0 and math.isnan(combined[3])
    with pytest.raises(ValueError, match="K >= 2"):
        REWARD_COMBINERS.get("outcome_process")(rewards[:, :1], torch.tensor([0, 0, 1, 1]), [1.0])


# ------------------------------------------------------------------------------------------------- DRA [167]


def test_submodular_diversity_down_weights_redundant_completions_of_a_group():
    # group 0: e0 = e1 = (1, 0), e2 = (0, 1): SMI = [1, 1, 0] -> weights [1/2, 1/2, 1]
    # group 1: e3 = (1, 0) (identical to e0, but another group: ignored), e4 = (.6, .8): cos = .6 -> 1/1.6 each
    # group 2: e5 = (−1, 0), e6 = (1, 0): cos = −1 counts as 0 -> weight 1
    embeddings = torch.tensor([[1.0, 0], [1, 0], [0, 1], [1, 0], [0.6, 0.8], [-1, 0], [1, 0]])
    groups = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, -1.0, 1.0, 0.0])
    shaped, stats = apply_reward_shaping(
        [("submodular_diversity", {"eps": 0.0})],
        rewards,
        StepBatch(group_ids=groups, hidden=embeddings[:, None], mask=torch.ones(7, 1)),  # one action: its own mean
    )
    expected = torch.tensor([0.5, 0.5, 1.0, 1 / 1.6, -1 / 1.6, 1.0, 0.0])
    torch.testing.assert_close(shaped, expected)
    assert stats["reward_shaping/diversity_weight_mean"] == pytest.approx(float(torch.tensor(
        [0.5, 0.5, 1.0, 1 / 1.6, 1 / 1.6, 1.0, 1.0]).mean()))  # fmt: skip
    # DRA-GRPO: three equally correct answers now differ; the distinct one gets the positive advantage
    # r̃ = [.5, .5, 1]: mean 2/3, unbiased std √(1/12) -> A = [−0.57735, −0.57735, 1.154701]
    advantages = compute_advantages("grpo", shaped[:3], groups[:3], eps=0.0)
    torch.testing.assert_close(advantages, torch.tensor([-1.0, -1.0, 2.0]) / math.sqrt(3.0))
    assert REWARD_SHAPERS.meta("submodular_diversity")["needs"] == ("hidden",)


def test_submodular_diversity_needs_embeddings():
    with pytest.raises(ValueError, match="hidden"):
        apply_reward_shaping([("submodular_diversity", {})], torch.ones(2), StepBatch(group_ids=torch.tensor([0, 0])))


# ------------------------------------------------------------------------------------------------ Miner [28]


def _miner_inputs() -> StepBatch:
    # group 0 (samples 0, 1): all correct; group 1 (2, 3): mixed; group 2 (4, 5): all wrong
    # sample 0 token log-probs [−2, 0] (ℓ = −1), sample 1 [−0.2, −0.2] (ℓ = −0.2): group mean −0.6
    logp = torch.tensor([[-2.0, 0.0], [-0.2, -0.2], [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]])
    return StepBatch(
        sample_advantages=torch.tensor([0.0, 0.0, 0.5, -0.5, 0.0, 0.0]),
        mask=torch.ones(6, 2),
        group_ids=torch.tensor([0, 0, 1, 1, 2, 2]),
        behaviour_logp=logp,
        rewards=torch.tensor([[1.0], [1.0], [1.0], [0.0], [0.0], [0.0]]),
    )


def test_intrinsic_mastery_rewards_uncertain_correct_answers_with_focal_token_credit():
    inputs = _miner_inputs()
    out = apply_credit([("intrinsic_mastery", {"calibration": 0.0})], inputs["sample_advantages"], inputs)
    # a_0 = max(0, −0.6 − (−1)) = 0.4, a_1 = max(0, −0.6 + 0.2) = 0 (a confident correct answer is not penalised);
    # focal credit a·(1 − p)^2: token p = e^−2 -> 0.4·(1 − e^−2)^2 = 0.299058, token p = 1 -> 0
    torch.testing.assert_close(out[0], torch.tensor([0.4 * (1 - math.exp(-2.0)) ** 2, 0.0]))
    torch.testing.assert_close(out[1], torch.zeros(2))
    torch.testing.assert_close(out[2:4], torch.tensor([[0.5, 0.5], [-0.5, -0.5]]))  # mixed group unchanged
    torch.testing.assert_close(out[4:], torch.zeros(2, 2))  # all wrong: no intrinsic signal


def test_intrinsic_mastery_calibrates_to_a_fraction_of_the_verifiable_signal():
    inputs = _miner_inputs()
    out = apply_credit([("intrinsic_mastery", {})], inputs["sample_advantages"], inputs)
    # verifiable mass Σ|A| = 4 actions × 0.5 = 2; intrinsic mass 0.299058 -> scale = 0.0015·2 / 0.299058, so the
    # intrinsic credit totals exactly 0.003
    torch.testing.assert_close(out[0], torch.tensor([0.003, 0.0]))
    torch.testing.assert_close(out[2:4], torch.tensor([[0.5, 0.5], [-0.5, -0.5]]))
    # without any verifiable signal the intrinsic one is switched off (the recipe's scale 0)
    alone = StepBatch(
        sample_advantages=torch.zeros(2),
        mask=torch.ones(2, 2),
        group_ids=torch.tensor([0, 0]),
        behaviour_logp=inputs["behaviour_logp"][:2],
        rewards=inputs["rewards"][:2],
    )
    torch.testing.assert_close(apply_credit([("intrinsic_mastery", {})], torch.zeros(2), alone), torch.zeros(2, 2))


# ------------------------------------------------------------------------------------------------ OREAL [147]


def test_outcome_reshaped_normalises_correct_and_incorrect_tokens_separately():
    # valid actions per sample [2, 3, 1, 2]: N = 8, correct samples 0 and 2 -> N+ = 3, N− = 5
    # weights: correct 1·8/3, incorrect 0.5·8/5 = 0.8
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]])
    advantages = torch.tensor([1.0, -1.0, 2.0, -0.5])
    inputs = StepBatch(
        sample_advantages=advantages,
        mask=mask,
        group_ids=torch.tensor([0, 0, 1, 1]),
        rewards=torch.tensor([[1.0], [0.0], [1.0], [0.0]]),
    )
    out = apply_credit([("outcome_reshaped", {})], advantages, inputs)
    weight = torch.tensor([8 / 3, 0.8, 8 / 3, 0.8])
    torch.testing.assert_close(out, (advantages * weight)[:, None].expand(4, 3))
    # with token_mean aggregation of the on-policy loss −A: Σ₊ −A / N₊ + 0.5 · Σ₋ −A / N₋
    loss = -out
    total = aggregate(loss, mask, "token_mean", loss_normalizer(mask, "token_mean"))
    positive = -(1.0 * 2 + 2.0 * 1) / 3  # samples 0 (2 actions) and 2 (1 action)
    negative = -(-1.0 * 3 + -0.5 * 2) / 5  # samples 1 (3 actions) and 3 (2 actions)
    assert total.item() == pytest.approx(positive + 0.5 * negative)
