"""SAS [118] self-aware credit: group-normalised returns of the pathwise log-likelihood per decoding step, checked
against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit import CREDIT_RULES, apply_credit
from genalign.experimental.credit.self_aware import self_aware_step_advantages

EPS = 1e-4


def test_step_advantages_are_per_step_group_normalised_returns():
    path_logp = torch.tensor([[-1.0, -2.0], [-3.0, 0.0], [-1.0, -1.0], [-2.0, -3.0]])
    groups = torch.tensor([0, 0, 1, 1])
    # returns G: [[-3, -2], [-3, 0]] and [[-2, -1], [-5, -3]]
    out = self_aware_step_advantages(path_logp, groups, eps=EPS)
    expected = torch.tensor(
        [
            [0.0, -1 / (1 + EPS)],
            [0.0, 1 / (1 + EPS)],
            [1.5 / (1.5 + EPS), 1 / (1 + EPS)],
            [-1.5 / (1.5 + EPS), -1 / (1 + EPS)],
        ]
    )  # group 0, step 0: equal returns; others: ±(half the gap) / (population std = half the gap)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)


def inputs_with(path_logp, mask, sample_advantages):
    return StepBatch(
        sample_advantages=sample_advantages,
        mask=mask,
        group_ids=torch.tensor([0, 0]),
        path_logp=path_logp,
    )


def test_rule_replaces_only_the_decoding_actions_and_adds_the_task_advantage():
    path_logp = torch.tensor([[-1.0, -2.0], [-3.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])  # a proxy action, then 2 steps (the last forced)
    inputs = inputs_with(path_logp, mask, torch.tensor([0.7, -0.7]))
    out = apply_credit([("self_aware_returns", {"task_weight": 0.5})], inputs["sample_advantages"], inputs)
    expected = torch.tensor([[0.7, 0.5 * 0.7, 0.0], [-0.7, -0.5 * 0.7, 0.0]])  # step 0 returns tie; step 1 masked
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    plain = apply_credit([("self_aware_returns", {})], inputs["sample_advantages"], inputs)
    assert plain[:, 1:].abs().sum() == 0 and torch.equal(plain[:, 0], inputs["sample_advantages"])


def test_rule_needs_path_logp_and_enough_actions():
    assert CREDIT_RULES.meta("self_aware_returns")["needs"] == ("path_logp",)
    no_path = StepBatch(sample_advantages=torch.zeros(2), mask=torch.ones(2, 2), group_ids=torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="path_logp"):
        apply_credit([("self_aware_returns", {})], torch.zeros(2), no_path)
    too_many = inputs_with(torch.zeros(2, 3), torch.ones(2, 2), torch.zeros(2))
    with pytest.raises(ValueError, match="decoding steps"):
        apply_credit([("self_aware_returns", {})], torch.zeros(2), too_many)
    with pytest.raises(ValueError, match="eps"):
        apply_credit(
            [("self_aware_returns", {"eps": 0.0})],
            torch.zeros(2),
            inputs_with(torch.zeros(2, 2), torch.ones(2, 2), torch.zeros(2)),
        )
