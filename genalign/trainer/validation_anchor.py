"""REVA-PO's Validation-Anchored Policy Reset (VAPR [18]): every ``eval.reset_to_best_every`` steps, the policy and its
reference are set to the weights of the best held-out evaluation so far, which resets the KL pressure accumulated
against a static reference (:class:`ValidationAnchor`, a stateful trainer component).

Reading chosen: "the best validation checkpoint" is the evaluation with the highest ``eval/accuracy`` (the configured
accuracy reward; the earliest wins a tie), the evaluation before training included; its trained parameters are kept
in memory (and in every checkpoint, so a resumed run resets to the same weights). A reset copies them into the
policy's trained parameters and into the frozen reference copy; the optimizer's moments are kept (the abstract does
not say; the reset moves the point, not the optimizer's statistics). A reset runs after the evaluation of a step that
is a multiple of ``reset_to_best_every`` (itself a multiple of ``eval.every``), never after the final evaluation.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

#: the evaluation result the best checkpoint is chosen by (the configured accuracy reward's mean)
METRIC = "eval/accuracy"


class ValidationAnchor:
    """The best evaluation so far and its weights; resets the policy and its reference to them when due.

    Args:
        policy: the policy (its ``anchor_reference`` moves the reference).
        named_parameters: the trained parameters by name (the optimizer's).
        every: reset every this many steps (> 0).
    """

    def __init__(self, policy: Any, named_parameters: list[tuple[str, nn.Parameter]], every: int) -> None:
        if every < 1:
            raise ValueError(f"eval.reset_to_best_every = {every} must be >= 1 here (0 builds no anchor).")
        self.policy, self.parameters, self.every = policy, dict(named_parameters), every
        self.best_score: float | None = None
        self.best_step = -1
        self.best_weights: dict[str, torch.Tensor] = {}
        self.reference_weights: dict[str, torch.Tensor] | None = None  # the weights of the last reset (None: none)
        self.resets = 0

    def after_evaluation(self, step: int, result: dict[str, Any], *, may_reset: bool) -> str | None:
        """Keep the weights of ``result``'s evaluation when it is the best so far, then reset when ``step`` is due
        (and ``may_reset``); returns a line for the log when it reset."""
        score = result.get(METRIC)
        if score is not None and score == score and (self.best_score is None or score > self.best_score):
            self.best_score, self.best_step = float(score), step
            self.best_weights = {name: p.detach().cpu().clone() for name, p in self.parameters.items()}
        if not (may_reset and step > 0 and step % self.every == 0 and self.best_weights):
            return None
        self.reset()
        return (f"step {step}: policy and reference reset to the best evaluation (step {self.best_step}, "
                f"{METRIC} {self.best_score:.3f})")  # fmt: skip

    def reset(self) -> None:
        """Copy the best weights into the policy's trained parameters and the reference."""
        with torch.no_grad():
            for name, param in self.parameters.items():
                param.copy_(self.best_weights[name].to(param.device, param.dtype))
        self.policy.anchor_reference(self.best_weights)
        self.reference_weights = self.best_weights  # the same tensors until a better evaluation replaces the best
        self.resets += 1

    def state_dict(self) -> dict[str, Any]:
        """The best evaluation and its weights, and the reference's weights when they are not those (a better
        evaluation after the last reset)."""
        same = self.reference_weights is self.best_weights
        reference = {} if same or self.reference_weights is None else dict(self.reference_weights)
        return {"best_score": self.best_score, "best_step": self.best_step, "resets": self.resets,
                "best_weights": dict(self.best_weights), "reference_is_best": same, "reference_weights": reference}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the best evaluation and move the reference back to the weights of the last reset (if any)."""
        self.best_score, self.best_step = state["best_score"], int(state["best_step"])
        self.resets = int(state["resets"])
        self.best_weights = {name: value.clone() for name, value in state["best_weights"].items()}
        self.reference_weights = None
        if state["reference_is_best"]:
            self.reference_weights = self.best_weights
        elif state["reference_weights"]:
            self.reference_weights = {name: value.clone() for name, value in state["reference_weights"].items()}
        if self.reference_weights is not None:
            self.policy.anchor_reference(self.reference_weights)
