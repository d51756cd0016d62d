"""POISE [257] (reward shaper ``probe_baseline``), hand-computed: a ridge probe on hidden-state and entropy features,
fitted online with forgetting, predicts each sample's baseline from its siblings' states (cross-rollout), never its
own; ``reinforce`` then uses ``r − v̂`` as the advantage."""

from __future__ import annotations

import torch

from genalign.algorithms import REWARD_SHAPERS, StepBatch, bind_option, compute_advantages
from genalign.experimental.shaping.probe import ProbeBaseline, probe_features

F64 = torch.float64
MASK = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
#: mean hidden states [3, 4], [0, 2], [1, 0], [−1, 0] (unit: [.6, .8], [0, 1], [1, 0], [−1, 0])
HIDDEN = torch.tensor([[[3.0, 4.0], [3.0, 4.0]], [[0.0, 2.0], [0.0, 2.0]], [[1.0, 0.0], [9.0, 9.0]],
                       [[-1.0, 0.0], [-1.0, 0.0]]])  # fmt: skip
ENTROPY = torch.tensor([[1.0, 2.0], [0.5, 0.5], [0.0, 7.0], [2.0, 0.0]])
#: the features by hand: [unit mean hidden (identity projection), mean entropy, max entropy, 1]; sample 2's padded
#: action (hidden [9, 9], entropy 7) is left out
FEATURES = torch.tensor([[0.6, 0.8, 1.5, 2.0, 1.0], [0.0, 1.0, 0.5, 0.5, 1.0], [1.0, 0.0, 0.0, 0.0, 1.0],
                         [-1.0, 0.0, 1.0, 2.0, 1.0]], dtype=F64)  # fmt: skip


def batch(hidden=HIDDEN) -> StepBatch:
    return StepBatch(mask=MASK, group_ids=torch.zeros(4, dtype=torch.long), hidden=hidden, entropy=ENTROPY)


def identity_probe(**hp) -> ProbeBaseline:
    probe = bind_option(REWARD_SHAPERS, "probe_baseline", {"projection_dim": 2, **hp})
    probe._projection = torch.eye(2, dtype=F64)  # the random projection replaced by the identity, for hand values
    return probe


def test_features_are_the_unit_mean_hidden_state_and_entropy_statistics():
    torch.testing.assert_close(probe_features(HIDDEN, ENTROPY, MASK, torch.eye(2, dtype=F64)), FEATURES)


def test_before_any_step_the_baseline_is_the_siblings_mean_reward():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=F64)
    shaped, _ = REWARD_SHAPERS.get("probe_baseline")(rewards, batch())
    torch.testing.assert_close(shaped, torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3], dtype=F64))
    advantages = compute_advantages("reinforce", shaped, torch.zeros(4, dtype=torch.long))
    torch.testing.assert_close(advantages, shaped)  # reinforce adds no baseline of its own


def test_the_probe_is_a_ridge_fit_of_earlier_steps_and_each_baseline_reads_only_the_siblings():
    probe = identity_probe(ridge=0.5, forgetting=0.8)
    first = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=F64)
    probe(first, batch())
    torch.testing.assert_close(probe.gram, FEATURES.T @ FEATURES)
    second = torch.tensor([0.0, 1.0, 1.0, 1.0], dtype=F64)
    shaped, stats = probe(second, batch())
    weights = torch.linalg.solve(FEATURES.T @ FEATURES + 0.5 * torch.eye(5, dtype=F64), FEATURES.T @ first)
    predicted = FEATURES @ weights  # [4] the probe's value of each sample's own states
    siblings = (predicted.sum() - predicted) / 3  # [4] cross-rollout: the mean over the other three
    torch.testing.assert_close(shaped, second - siblings)
    torch.testing.assert_close(torch.tensor(stats["reward_shaping/probe_mse"], dtype=F64),
                               (predicted - second).square().mean())  # fmt: skip
    torch.testing.assert_close(probe.gram, 0.8 * FEATURES.T @ FEATURES + FEATURES.T @ FEATURES)  # forgetting
    torch.testing.assert_close(probe.moment, 0.8 * FEATURES.T @ first + FEATURES.T @ second)
    # sample 0's own states never enter its baseline: move them and only its siblings' baselines change
    moved = HIDDEN.clone()
    moved[0] = torch.tensor([0.0, 5.0])
    again = identity_probe(ridge=0.5, forgetting=0.8)
    again.load_state_dict(probe.state_dict())
    reference = identity_probe(ridge=0.5, forgetting=0.8)
    reference.load_state_dict(probe.state_dict())
    unmoved, _ = reference(second, batch())
    shifted, _ = again(second, batch(moved))
    torch.testing.assert_close(shifted[0], unmoved[0], rtol=0, atol=1e-12)
    assert (shifted[1:] - unmoved[1:]).abs().min() > 1e-3


def test_a_missing_reward_stays_missing_and_the_state_round_trips():
    probe = identity_probe()
    shaped, _ = probe(torch.tensor([1.0, float("nan"), 0.0, 1.0], dtype=F64), batch())
    assert torch.isnan(shaped[1])
    torch.testing.assert_close(shaped[[0, 2, 3]], torch.tensor([1 - 0.5, 0 - 1.0, 1 - 0.5], dtype=F64))
    assert probe.seen == 3  # the missing sample is not fitted
    restored = identity_probe()
    restored.load_state_dict(probe.state_dict())
    torch.testing.assert_close(restored.weights(), probe.weights())


#: single_rollout: the features of the prompt's state alone (each row's first action): unit h_i0, H_i0, H_i0, 1
PROMPT_FEATURES = torch.tensor([[0.6, 0.8, 1.0, 1.0, 1.0], [0.0, 1.0, 0.5, 0.5, 1.0], [1.0, 0.0, 0.0, 0.0, 1.0],
                                [-1.0, 0.0, 2.0, 2.0, 1.0]], dtype=F64)  # fmt: skip


def single_rollout_batch(hidden=HIDDEN) -> StepBatch:
    """One rollout per prompt: every sample is its own group."""
    return StepBatch(mask=MASK, group_ids=torch.arange(4), hidden=hidden, entropy=ENTROPY)


def test_single_rollout_first_step_baseline_is_the_other_samples_mean_over_the_batch():
    probe = identity_probe(single_rollout=True)
    shaped, _ = probe(torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=F64), single_rollout_batch())
    # no sibling in any group: the leave-one-out mean of the batch (1/3, 2/3, 2/3, 1/3)
    torch.testing.assert_close(shaped, torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3], dtype=F64))
    torch.testing.assert_close(probe.gram, PROMPT_FEATURES.T @ PROMPT_FEATURES)  # fitted on the prompt states


def test_single_rollout_baseline_is_the_probe_value_of_the_samples_own_prompt_state():
    probe = identity_probe(single_rollout=True, ridge=0.5)
    first = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=F64)
    probe(first, single_rollout_batch())
    state = probe.state_dict()
    second = torch.tensor([0.0, 1.0, 1.0, 1.0], dtype=F64)
    shaped, _ = probe(second, single_rollout_batch())
    gram = PROMPT_FEATURES.T @ PROMPT_FEATURES + 0.5 * torch.eye(5, dtype=F64)
    weights = torch.linalg.solve(gram, PROMPT_FEATURES.T @ first)
    torch.testing.assert_close(shaped, second - PROMPT_FEATURES @ weights)
    # the sampled trajectory (the states after the first action) never enters the baseline ...
    moved = HIDDEN.clone()
    moved[0, 1] = torch.tensor([-7.0, 1.0])
    again = identity_probe(single_rollout=True, ridge=0.5)
    again.load_state_dict(state)
    unmoved, _ = again(second, single_rollout_batch(moved))
    torch.testing.assert_close(unmoved, shaped)
    # ... but the prompt's own state does (no sibling is needed)
    moved[0, 0] = torch.tensor([0.0, 5.0])
    other = identity_probe(single_rollout=True, ridge=0.5)
    other.load_state_dict(state)
    shifted, _ = other(second, single_rollout_batch(moved))
    assert abs(float(shifted[0] - shaped[0])) > 1e-3
    torch.testing.assert_close(shifted[1:], shaped[1:])
