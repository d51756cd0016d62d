"""REVA-PO's VAPR [18] (``eval.reset_to_best_every``, :class:`ValidationAnchor`), by hand: the weights of the best
evaluation so far are kept, a due reset copies them into the policy and its reference, a later worse evaluation
changes nothing, and the state restores the reference of the last reset exactly."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from genalign.policies.lm.reference import ReferencePolicy, anchor_reference
from genalign.trainer.validation_anchor import ValidationAnchor


class RecordingPolicy:
    """Stands in for a policy: records the weights its reference is anchored to."""

    def __init__(self) -> None:
        self.reference: dict[str, torch.Tensor] | None = None

    def anchor_reference(self, weights):
        self.reference = {name: value.clone() for name, value in weights.items()}


def setup():
    weight = nn.Parameter(torch.tensor([1.0, 2.0]))
    policy = RecordingPolicy()
    return weight, policy, ValidationAnchor(policy, [("w", weight)], every=2)


def test_a_due_reset_restores_the_best_evaluations_weights_in_the_policy_and_the_reference():
    weight, policy, anchor = setup()
    assert anchor.after_evaluation(0, {"eval/accuracy": 0.5}, may_reset=True) is None  # the best so far: [1, 2]
    with torch.no_grad():
        weight.copy_(torch.tensor([3.0, 4.0]))  # training moves the weights
    assert anchor.after_evaluation(1, {"eval/accuracy": 0.25}, may_reset=True) is None  # worse, step 1 not due
    with torch.no_grad():
        weight.copy_(torch.tensor([5.0, 6.0]))
    line = anchor.after_evaluation(2, {"eval/accuracy": 0.5}, may_reset=True)  # a tie: the earliest stays best
    assert line is not None and "best evaluation (step 0" in line
    torch.testing.assert_close(weight.detach(), torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(policy.reference["w"], torch.tensor([1.0, 2.0]))
    assert anchor.resets == 1


def test_no_reset_after_the_final_evaluation_and_a_better_one_becomes_the_anchor():
    weight, policy, anchor = setup()
    anchor.after_evaluation(0, {"eval/accuracy": 0.5}, may_reset=True)
    with torch.no_grad():
        weight.copy_(torch.tensor([3.0, 4.0]))
    assert anchor.after_evaluation(2, {"eval/accuracy": 0.75}, may_reset=False) is None  # the final evaluation
    torch.testing.assert_close(weight.detach(), torch.tensor([3.0, 4.0]))
    assert policy.reference is None and anchor.best_step == 2


def test_the_state_restores_the_reference_of_the_last_reset_not_a_later_best():
    weight, _, anchor = setup()
    anchor.after_evaluation(0, {"eval/accuracy": 0.5}, may_reset=True)
    with torch.no_grad():
        weight.copy_(torch.tensor([3.0, 4.0]))
    anchor.after_evaluation(2, {"eval/accuracy": 0.1}, may_reset=True)  # reset to [1, 2]
    with torch.no_grad():
        weight.copy_(torch.tensor([7.0, 8.0]))
    anchor.after_evaluation(3, {"eval/accuracy": 0.9}, may_reset=True)  # a new best, not due: reference stays [1, 2]
    state = anchor.state_dict()
    resumed_policy = RecordingPolicy()
    resumed = ValidationAnchor(resumed_policy, [("w", nn.Parameter(torch.zeros(2)))], every=2)
    resumed.load_state_dict(state)
    torch.testing.assert_close(resumed_policy.reference["w"], torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(resumed.best_weights["w"], torch.tensor([7.0, 8.0]))
    assert (resumed.best_step, resumed.best_score, resumed.resets) == (3, 0.9, 1)


def test_the_frozen_reference_copy_is_moved_and_a_lora_reference_is_refused():
    model = nn.Linear(2, 1)
    reference = ReferencePolicy("frozen_copy", model, lambda: nn.Linear(2, 1))
    anchor_reference(reference, {"weight": torch.tensor([[0.5, -0.5]]), "bias": torch.tensor([2.0])})
    out = reference(lambda module: module(torch.tensor([[1.0, 1.0]])))
    torch.testing.assert_close(out, torch.tensor([[2.0]]))  # 0.5 − 0.5 + 2
    with pytest.raises(ValueError, match="not a parameter of the reference copy"):
        anchor_reference(reference, {"lora_A": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"needs policy\.reference = 'frozen_copy'"):
        anchor_reference(ReferencePolicy("lora_disabled", model, lambda: model), {"weight": torch.zeros(1, 2)})
