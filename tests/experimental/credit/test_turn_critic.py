"""turn-PPO's learned turn-level critic [229] (``turn_critic``, genalign/experimental/credit/turn_critic.py):
hand-computed turn-level GAE with a probe whose values are set, the fallback to the group values before any fit, the
probe learning a value online, its state round trip and its error statistic."""

from __future__ import annotations

import json

import pytest
import torch

from genalign.algorithms import StepBatch, apply_credit
from genalign.algorithms.turns import turn_layout
from genalign.experimental.credit.turn_critic import TurnCritic, first_action_positions
from genalign.experimental.shaping.probe import random_projection
from tests.experimental.credit.turn_batches import close, t, turn_batch

E0, E1 = [2.0, 0.0], [0.0, 3.0]  # unit: e0 and e1
D = 4  # projection_dim


def two_turn_batch(**values) -> StepBatch:
    """2 samples of one group, 2 turns of 2 actions each; the hidden state at each turn's first action is e0 or e1
    (sample 0: e0 then e1; sample 1: e0 then e0), the other positions hold noise that the critic must not read."""
    noise = [5.0, -7.0]
    hidden = t([[E0, noise, E1, noise], [E0, noise, E0, noise]])  # [2, 4, 2]
    return StepBatch(
        mask=torch.ones(2, 4, dtype=torch.float64),
        group_ids=torch.tensor([0, 0]),
        turn_ids=torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1]]),
        turn_rewards=t([[0.0, 1.0], [0.5, 0.0]]),
        combined_reward=t([1.0, 0.0]),
        sample_advantages=t([1.0, -1.0]),
        hidden=hidden,
        **values,
    )


def probe_with_values(v0: float, v1: float, seed: int = 0) -> list[float]:
    """``w`` ``[D + 1]`` (bias 0) whose value is ``v0`` at hidden state e0 and ``v1`` at e1: the minimum-norm solution
    of ``P[0]·w = v0, P[1]·w = v1`` for the rule's projection ``P`` ``[2, D]``."""
    projection = random_projection(2, D, seed)
    weight = torch.linalg.pinv(projection) @ t([v0, v1])
    return [*weight.tolist(), 0.0]


def credit(batch, **hp):
    return apply_credit([("turn_critic", hp)], batch["sample_advantages"], batch)


def test_first_action_positions_find_each_turns_first_valid_action():
    layout = turn_layout(turn_batch(), "test")  # turn 0 of sample 1 starts at 0, its turn 1 at 2 (1 is environment)
    assert first_action_positions(layout).tolist() == [[0, 3, 6], [0, 2, 6], [0, 6, 6], [0, 2, 4]]


def test_gae_over_turns_with_the_probes_values():
    # V(e0) = 1, V(e1) = 0.5 -> V: s0 (1, 0.5), s1 (1, 1); u: s0 (0, 1 + R=1) = (0, 2), s1 (0.5, 0 + 0) = (0.5, 0)
    # γ = λ = 0.5: δ s0 = (0 + 0.5·0.5 − 1, 2 − 0.5) = (−0.75, 1.5) -> A = (−0.75 + 0.25·1.5, 1.5) = (−0.375, 1.5)
    #              δ s1 = (0.5 + 0.5·1 − 1, 0 − 1) = (0, −1)         -> A = (0 + 0.25·(−1), −1) = (−0.25, −1)
    out = credit(two_turn_batch(), gamma=0.5, lam=0.5, projection_dim=D, critic_weight=probe_with_values(1.0, 0.5))
    close(out, [[-0.375, -0.375, 1.5, 1.5], [-0.25, -0.25, -1.0, -1.0]], tol=1e-9)
    # λ = 1: A = G − V with G: s0 (1, 2), s1 (0.5, 0)
    out = credit(two_turn_batch(), gamma=0.5, lam=1.0, projection_dim=D, critic_weight=probe_with_values(1.0, 0.5))
    close(out, [[0.0, 0.0, 1.5, 1.5], [-0.5, -0.5, -1.0, -1.0]], tol=1e-9)


def test_before_any_fit_the_values_are_the_groups_and_equal_turn_baseline():
    batches = ((turn_batch(hidden=torch.randn(4, 6, 3, dtype=torch.float64)), 8), (two_turn_batch(), 4))
    for batch, pairs in batches:  # pairs: the present turns (2 + 2 + 1 + 3 and 2 + 2)
        for gamma, lam in ((0.5, 1.0), (1.0, 0.0), (0.9, 0.7)):
            expected = apply_credit(
                [("turn_baseline", {"gamma": gamma, "lam": lam})], batch["sample_advantages"], batch
            )
            close(credit(batch, gamma=gamma, lam=lam), expected.tolist())
            critic = TurnCritic(gamma=gamma, lam=lam, projection_dim=D)  # the bound option's first step
            close(critic(torch.zeros_like(batch.mask), batch), expected.tolist())
            assert critic.stats["turn_critic_fitted"] == 0.0 and critic.seen == pairs


def test_the_probes_values_change_the_advantages():
    batch = two_turn_batch()
    baseline = apply_credit([("turn_baseline", {"gamma": 0.5, "lam": 0.5})], batch["sample_advantages"], batch)
    # group values: G s0 (1, 2), s1 (0.5, 0) -> V_G (0.75, 1); probe values V(e0) = 1, V(e1) = 0.5 differ
    out = credit(batch, gamma=0.5, lam=0.5, projection_dim=D, critic_weight=probe_with_values(1.0, 0.5))
    assert float((out - baseline).abs().max()) > 0.4
    # a probe whose values at sample 0's states (e0, e1) are the group's values (0.75, 1) gives turn_baseline back on
    # sample 0 with λ = 1 (A = G − V); sample 1's turn 1 (e0: 0.75, group 1) still differs
    same = credit(batch, gamma=0.5, lam=1.0, projection_dim=D, critic_weight=probe_with_values(0.75, 1.0))
    expected = apply_credit([("turn_baseline", {"gamma": 0.5, "lam": 1.0})], batch["sample_advantages"], batch)
    close(same[0], expected[0].tolist())
    assert float((same[1] - expected[1]).abs().max()) == pytest.approx(0.25)


def test_the_probe_learns_the_value_of_each_state_from_earlier_returns():
    critic = TurnCritic(gamma=1.0, lam=1.0, projection_dim=D, ridge=1e-3, forgetting=1.0)
    batch = two_turn_batch()  # returns: s0 (0 + 2, 2), s1 (0.5, 0) at states s0 (e0, e1), s1 (e0, e0)
    incoming = torch.zeros(2, 4, dtype=torch.float64)
    critic(incoming, batch)
    assert critic.stats == {"turn_critic_mse": pytest.approx(float("nan"), nan_ok=True), "turn_critic_fitted": 0.0}
    for _ in range(5):
        critic(incoming, batch)
    # least squares: V(e1) = 2 (one return); V(e0) = mean(2, 0.5, 0) = 5/6
    projection = random_projection(2, D, 0)
    weight = critic.weights()
    values = torch.cat([projection, torch.ones(2, 1, dtype=torch.float64)], 1) @ weight
    close(values, [5 / 6, 2.0], tol=1e-2)
    # the error statistic before the last update: (V − G)² over the 4 pairs ≈ ((5/6 − 2)² + 0 + (5/6 − 0.5)² + (5/6)²)/4
    assert critic.stats["turn_critic_fitted"] == 1.0
    assert critic.stats["turn_critic_mse"] == pytest.approx(((7 / 6) ** 2 + (1 / 3) ** 2 + (5 / 6) ** 2) / 4, abs=1e-2)
    # GAE with λ = 1 is now G − V: s0 (2 − 5/6, 2 − 2), s1 (0.5 − 5/6, 0 − 5/6)
    close(critic(incoming, batch), [[7 / 6] * 2 + [0.0] * 2, [-1 / 3] * 2 + [-5 / 6] * 2], tol=1e-2)


def test_state_round_trip_is_json_and_refuses_another_width():
    critic = TurnCritic(projection_dim=D)
    critic(torch.zeros(2, 4, dtype=torch.float64), two_turn_batch())
    fresh = TurnCritic(projection_dim=D)
    fresh.load_state_dict(json.loads(json.dumps(critic.state_dict())))
    assert fresh.state_dict() == critic.state_dict() and fresh.seen == 4
    torch.testing.assert_close(fresh.weights(), critic.weights())
    with pytest.raises(ValueError, match="projection_dim"):
        TurnCritic(projection_dim=D + 1).load_state_dict(critic.state_dict())


def test_bad_hyperparameters_name_the_field():
    with pytest.raises(ValueError, match=r"lam=1\.5"):
        TurnCritic(lam=1.5)
    with pytest.raises(ValueError, match="projection_dim=0"):
        TurnCritic(projection_dim=0)
    with pytest.raises(ValueError, match="forgetting=0"):
        TurnCritic(forgetting=0)
    with pytest.raises(ValueError, match="critic_weight has 2 entries"):
        credit(two_turn_batch(), projection_dim=D, critic_weight=[0.0, 0.0])
