"""Turn-level credit rules of multi-turn rollouts (genalign/experimental/credit/turns.py), hand-computed on the batch of
:mod:`tests.experimental.credit.turn_batches`: per-turn rewards as a return-to-go, AT-GRPO's (prompt, turn) groups
[126], turn-PPO's turn-level values from the group [229] and StepPO's step-aligned credit [7]."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch, apply_credit, check_rule_order
from tests.experimental.credit.turn_batches import MASK, close, t, turn_batch

R2 = 1 / math.sqrt(2)


def credit(name, batch, **hp):
    return apply_credit([(name, hp)], batch["sample_advantages"], batch)


# -------------------------------------------------------------------------------------------------- return-to-go
def test_turn_reward_to_go_adds_the_discounted_sum_of_per_turn_normalised_rewards():
    # group 0, turn 0: rewards (1, 0) -> z = (+1/√2, −1/√2) (unbiased std √0.5); turn 1: (0, 2) -> (−1/√2, +1/√2);
    # group 1: turn 0 (0.5, 0.5) is constant and turns 1, 2 hold < 2 rewards -> z = 0.
    # γ = 0.5: sample 0 gets +1/√2 − 0.5/√2 on turn 0 and −1/√2 on turn 1; sample 1 the opposite.
    out = credit("turn_reward_to_go", turn_batch(), gamma=0.5, eps=0.0)
    close(out[0], [1 + 0.5 * R2, 1 + 0.5 * R2, 1.0, 1 - R2, 1.0, 1.0])  # environment token and padding unchanged
    close(out[1], [-1 - 0.5 * R2, -1.0, -1 + R2, -1 + R2, -1 + R2, -1.0])
    close(out[2:], [[0.5] * 6, [-0.5] * 6])
    # Dr. GRPO centring, γ = 1, c = 2: z = (0.5, −1) and (−0.5, 1) -> to-go (−0.5, −1) and (0.5, 1)
    out = credit("turn_reward_to_go", turn_batch(), gamma=1.0, coef=2.0, scale_by_std=False)
    close(out[0, [0, 1, 3]], [0.0, 0.0, -1.0])
    close(out[1, [0, 2, 3, 4]], [0.0, 1.0, 1.0, 1.0])


def test_turn_reward_to_go_names_a_bad_discount():
    with pytest.raises(ValueError, match=r"gamma in \[0, 1\].*gamma=1.5"):
        credit("turn_reward_to_go", turn_batch(), gamma=1.5)


# ------------------------------------------------------------------------------------------------------- AT-GRPO
def test_at_grpo_normalises_each_turn_within_its_prompt_and_turn():
    # u = turn reward (0 where none) + R: s0 (2, 1), s1 (0, 2), s2 (1.5), s3 (0.5, 0, 1)
    # Dr. GRPO per (group, turn): g0 t0 (2, 0) -> ±1; g0 t1 (1, 2) -> ∓0.5; g1 t0 (1.5, 0.5) -> ±0.5; lone turns -> 0
    out = credit("at_grpo", turn_batch(), scale_by_std=False)
    close(out, [[1, 1, 0, -0.5, 0, 0], [-1, 0, 0.5, 0.5, 0.5, 0], [0.5, 0.5, 0.5, 0, 0, 0], [-0.5, 0, 0, 0, 0, 0]])
    local_only = credit("at_grpo", turn_batch(), scale_by_std=False, team_coef=0.0)  # g0: (1, 0) and (0, 2)
    close(local_only[:2], [[0.5, 0.5, 0, -1, 0, 0], [-0.5, 0, 1, 1, 1, 0]])
    close(local_only[2:], [[0.0] * 6] * 2)  # group 1: constant turn 0, lone later turns
    scaled = credit("at_grpo", turn_batch(), eps=0.0)  # GRPO: g0 t0 (2, 0) has std √2
    close(scaled[0, :2], [R2, R2])


# ----------------------------------------------------------------------------------------------------- turn-PPO
def test_turn_baseline_is_the_return_minus_the_groups_value_of_the_same_turn():
    # u: s0 (1, 0 + R=1), s1 (0, 2 + 0), s2 (0.5 + 1), s3 (0.5, 0, 1 + 0). γ = 0.5:
    # G: s0 (1.5, 1), s1 (1, 2), s2 (1.5), s3 (0.75, 0.5, 1); V: g0 (1.25, 1.5), g1 (1.125, 0.5, 1)
    out = credit("turn_baseline", turn_batch(), gamma=0.5)
    close(out, [[0.25, 0.25, 0, -0.5, 0, 0], [-0.25, 0, 0.5, 0.5, 0.5, 0],
                [0.375, 0.375, 0.375, 0, 0, 0], [-0.375, 0, 0, 0, 0, 0]])  # fmt: skip
    # λ = 0, γ = 1: δ_k = u_k + V_{k+1} − V_k with V: g0 (2, 1.5), g1 (1.5, 1, 1)
    # s0: (1 + 1.5 − 2, 1 − 1.5) = (0.5, −0.5); s1: (−0.5, 0.5); s2: 1.5 − 1.5 = 0; s3: (0.5 + 1 − 1.5, 0, 0) = 0
    out = credit("turn_baseline", turn_batch(), gamma=1.0, lam=0.0)
    close(out[:2], [[0.5, 0.5, 0, -0.5, 0, 0], [-0.5, 0, 0.5, 0.5, 0.5, 0]])
    close(out[2:], [[0.0] * 6] * 2)


def test_turn_baseline_gives_zero_to_a_sample_without_an_outcome():
    batch = turn_batch().with_values(combined_reward=t([1.0, math.nan, 1.0, 0.0]))
    out = credit("turn_baseline", batch, gamma=0.5)
    close(out[1], [0.0] * 6)
    close(out[0], [0.0] * 6)  # alone in its group at every turn: its return is its own baseline


def test_rules_that_replace_the_advantages_must_come_first():
    assert CREDIT_RULES.meta("at_grpo")["replaces"] and CREDIT_RULES.meta("turn_baseline")["replaces"]
    check_rule_order(["turn_baseline", "step_aligned"])
    with pytest.raises(ValueError, match="put it first"):
        check_rule_order(["step_aligned", "at_grpo"])


# -------------------------------------------------------------------------------------------------------- StepPO
def test_step_aligned_gives_every_step_the_same_weight_whatever_its_length():
    # weights L_i / (K_i·L_ik): s0 (3/4, 3/2), s1 (2, 2/3), s2 (1), s3 (4/3, 4/3, 2/3)
    out = credit("step_aligned", turn_batch())
    close(out, [[0.75, 0.75, 1.0, 1.5, 1.0, 1.0], [-2.0, -1.0, -2 / 3, -2 / 3, -2 / 3, -1.0],
                [0.5] * 6, [-2 / 3, -0.5, -2 / 3, -0.5, -1 / 3, -1 / 3]])  # fmt: skip
    valid = t(MASK) > 0
    per_step = [[(out[0, :3] * valid[0, :3]).sum(), out[0, 3]], [out[1, 0], out[1, 2:5].sum()]]
    close(torch.stack([torch.stack(row) for row in per_step]), [[1.5, 1.5], [-2.0, -2.0]])  # A_i·L_i/K_i per step
    close((out * valid).sum(1), [3.0, -4.0, 1.5, -2.0])  # each sample keeps its total weight A_i·L_i


def test_step_aligned_averages_the_incoming_advantages_of_each_step():
    incoming = t([[1.0, 3.0, 9.0, 2.0, 0.0, 0.0]] + [[0.0] * 6] * 3)  # e.g. after a per-token rule
    batch = turn_batch()
    rule = CREDIT_RULES.get("step_aligned")
    close(rule(incoming, batch, equal_steps=False)[0], [2.0, 2.0, 9.0, 2.0, 0.0, 0.0])  # turn 0 mean 2; env kept
    close(rule(incoming, batch)[0], [1.5, 1.5, 9.0, 3.0, 0.0, 0.0])  # weights 3/4 and 3/2


def test_turn_rules_name_the_missing_structure():
    batch = StepBatch(mask=t(MASK), group_ids=torch.tensor([0, 0, 1, 1]), sample_advantages=t([1.0, -1, 1, -1]))
    with pytest.raises(ValueError, match=r"credit rule 'step_aligned' needs the signal 'turn_ids'"):
        credit("step_aligned", batch)
