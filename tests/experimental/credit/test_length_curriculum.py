"""The entropy-gated length curriculum of OPD [93]: the dense term only within the horizon, the horizon grown in
stages while the entropy is healthy and held when it collapses, and kept across a checkpoint."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch, bind_option

F64 = torch.float64
LOG2 = math.log(2.0)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
STUDENT = torch.tensor([[0.5, 0.5, 0.25], [0.5, 0.25, 1.0]], dtype=F64)
TEACHER = torch.tensor([[0.25, 0.5, 0.5], [1.0, 0.125, 1.0]], dtype=F64)
GAP = torch.tensor([[-LOG2, 0.0, LOG2], [LOG2, -LOG2, 0.0]], dtype=F64)


def batch(entropy: float) -> StepBatch:
    return StepBatch(
        mask=MASK, behaviour_logp=STUDENT.log() * MASK, teacher_action_logp=TEACHER.log() * MASK,
        teacher_scored=torch.tensor([True, True]), rewards=torch.tensor([[1.0], [0.0]]), progress=0.0,
        entropy=torch.full((2, 3), entropy) * MASK,
    )  # fmt: skip


INCOMING = torch.tensor([[1.0], [-1.0]], dtype=F64).expand(2, 3).clone()


def test_the_dense_term_stops_at_the_horizon():
    rule = bind_option(CREDIT_RULES, "length_curriculum_opd", {"length_start": 1, "reward_weight": 0.5})
    out = rule(INCOMING.clone(), batch(1.0))
    inside = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(out, 0.5 * INCOMING + inside * GAP)


def test_the_horizon_grows_only_while_the_entropy_is_healthy_and_survives_a_checkpoint():
    hp = {"length_start": 1, "length_growth": 2.0, "stage_steps": 2, "entropy_floor": 0.5, "reward_weight": 0.0}
    rule = bind_option(CREDIT_RULES, "length_curriculum_opd", hp)
    for _ in range(2):  # a stage at entropy 0.2: collapsing, the horizon is held
        rule(INCOMING.clone(), batch(0.2))
    assert rule.state_dict() == {"horizon": 1, "steps_in_stage": 0}
    for _ in range(2):  # a healthy stage: 1 -> 2
        rule(INCOMING.clone(), batch(0.9))
    assert rule.state_dict()["horizon"] == 2
    resumed = bind_option(CREDIT_RULES, "length_curriculum_opd", hp)
    resumed.load_state_dict(rule.state_dict())
    out = resumed(INCOMING.clone(), batch(0.9))
    torch.testing.assert_close(out, GAP * torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]], dtype=F64))


@pytest.mark.parametrize("hp", [{"length_start": 0}, {"length_growth": 0.5}, {"length_start": 8, "length_max": 4}])
def test_bad_curricula_are_refused(hp):
    with pytest.raises(ValueError):
        bind_option(CREDIT_RULES, "length_curriculum_opd", hp)
