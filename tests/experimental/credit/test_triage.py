"""TRIAGE [8]'s role-typed segment credit (genalign/experimental/credit/triage.py), hand-computed on the batch of
:mod:`tests.experimental.credit.turn_batches`: each declared turn gets the bounded process reward of its judged role."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import apply_credit
from genalign.environments.judges import ROLES
from genalign.experimental.credit.triage import ROLE_NAMES
from tests.experimental.credit.turn_batches import close, turn_batch

# 1 + role: 1 decisive, 2 exploration, 3 infrastructure, 4 regression; 0 no role
TURN_ROLES = [[2, 1, 0], [4, 3, 0], [1, 0, 0], [3, 0, 4]]


def test_each_turn_gets_the_process_reward_of_its_role_added_to_the_outcome():
    batch = turn_batch(turn_roles=torch.tensor(TURN_ROLES))
    out = apply_credit([("triage", {})], batch["sample_advantages"], batch)
    # sample 0 (A = 1): turn 0 exploration +0.2 on its 2 actions, turn 1 decisive +0.1; its env tokens (mask 0) keep 1
    # sample 1 (A = −1): turn 0 regression −0.3, turn 1 infrastructure −0.1
    # sample 2 (A = 0.5): turn 0 decisive +0.1; sample 3 (A = −0.5): turn 0 infrastructure −0.1, turn 1 no role,
    # turn 2 regression −0.3
    close(out, [[1.2, 1.2, 1.0, 1.1, 1.0, 1.0], [-1.3, -1.0, -1.1, -1.1, -1.1, -1.0],
                [0.6, 0.6, 0.6, 0.5, 0.5, 0.5], [-0.6, -0.5, -0.5, -0.5, -0.8, -0.8]], tol=1e-12)  # fmt: skip


def test_the_process_rewards_are_bounded_and_configurable():
    batch = turn_batch(turn_roles=torch.tensor(TURN_ROLES))
    out = apply_credit([("triage", {"regression": -5.0, "bound": 0.4, "exploration": 0.0})], batch["sample_advantages"],
                       batch)  # fmt: skip
    close(out[1, [0, 2]], [-1.4, -1.1], tol=1e-12)  # regression clamped to −0.4
    close(out[0, [0, 3]], [1.0, 1.1], tol=1e-12)
    with pytest.raises(ValueError, match=r"bound > 0"):
        apply_credit([("triage", {"bound": 0.0})], batch["sample_advantages"], batch)


def test_without_roles_nothing_changes_and_the_role_names_agree():
    batch = turn_batch(turn_roles=torch.zeros(4, 3, dtype=torch.long))
    out = apply_credit([("triage", {})], batch["sample_advantages"], batch)
    close(out, [[a] * 6 for a in (1.0, -1.0, 0.5, -0.5)])
    assert ROLE_NAMES == ROLES
