"""Update schedules: how the passes over one rollout batch are arranged (``algorithm.update_schedule``).

``standard`` makes ``algorithm.inner_epochs`` passes, one after the other; the update loop
(:func:`genalign.trainer.update.run_update`) calls :meth:`UpdateSchedule.after_pass` after every pass, where a schedule
may move the parameters (the experimental tier's ``sfpo``, [222] SFPO: :mod:`genalign.experimental.schedules`). Nothing
persists between updates, so a schedule adds no checkpoint state.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from genalign.registry import Option, Registry


class UpdateSchedule(Protocol):
    """One rollout batch's schedule: ``passes`` passes over the batch, with a hook after each. The class method
    ``count_passes(*, inner_epochs, **args)`` checks the hyper-parameters (ValueError / TypeError naming the field) and
    returns the passes without building a schedule."""

    passes: int

    def after_pass(self, index: int) -> None:
        """Called after pass ``index`` (0-based) of the update."""

    def metrics(self) -> dict[str, float]:
        """Metrics of the last update (merged into the step's record)."""


#: name -> ``schedule(parameters, optimizer, *, inner_epochs, **args) -> UpdateSchedule``
UPDATE_SCHEDULES: Registry = Registry("update schedule", catalogue="genalign.experimental.schedules")


@UPDATE_SCHEDULES.register(
    "standard",
    binding="keywords",  # count_passes takes no keyword of its own
    formula="μ passes over the batch: θ ← θ − η∇L(θ), μ × minibatches times",
    source="PPO / GRPO",
    summary="algorithm.inner_epochs passes over each rollout batch, one after the other.",
)
class StandardSchedule:
    """``inner_epochs`` passes, no hook."""

    def __init__(self, parameters: list[nn.Parameter], optimizer: torch.optim.Optimizer, *, inner_epochs: int) -> None:
        self.passes = self.count_passes(inner_epochs=inner_epochs)

    @classmethod
    def count_passes(cls, *, inner_epochs: int) -> int:
        return inner_epochs

    def after_pass(self, index: int) -> None:
        return None

    def metrics(self) -> dict[str, float]:
        return {}


def build_schedule(
    option: Option, parameters: list[nn.Parameter], optimizer: torch.optim.Optimizer, *, inner_epochs: int
) -> UpdateSchedule:
    """The schedule ``option`` (``algorithm.update_schedule``) of :data:`UPDATE_SCHEDULES` for one update (call it
    before the first pass: SFPO records θ_0 here)."""
    return UPDATE_SCHEDULES.get(option.name)(parameters, optimizer, inner_epochs=inner_epochs, **option.args)


def schedule_passes(option: Option, *, inner_epochs: int) -> int:
    """Passes over each rollout batch of the schedule ``option`` (for the optimizer-step count), without building it;
    raises ValueError / TypeError for a bad hyper-parameter."""
    return UPDATE_SCHEDULES.get(option.name).count_passes(inner_epochs=inner_epochs, **option.args)
