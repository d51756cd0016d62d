"""``sfpo`` (experimental tier) is [222] SFPO (Slow-Fast Policy
Optimization): a fast trajectory of ``K`` passes on the batch, a reposition back towards the starting point, and one
slow correction pass from there:

    θ_k+1 = θ_k − η ∇L(θ_k),  k = 0..K−1        (fast trajectory, from θ_0 = the parameters before the update)
    θ̃ = θ_0 + α (θ_K − θ_0)                      (reposition: limits the off-policy drift of the fast steps)
    θ_new = θ̃ − η ∇L(θ̃)                          (slow correction)

``L`` is the configured objective with the old log-probs of the batch (those of ``θ_0``) throughout, and each "pass"
is ``algorithm.minibatches`` optimizer steps, exactly as one inner epoch of the standard schedule; the update loop
(:func:`genalign.trainer.update.run_update`) calls :meth:`UpdateSchedule.after_pass` after every pass, and the SFPO
schedule repositions after pass ``K − 1``.

Optimizer state at the reposition (``optimizer_state``), genalign's reading: the abstract says nothing about it, and
the reposition moves the parameters but not the optimizer. ``keep`` (default) leaves Adam's moments and step count as
the fast trajectory left them: they are statistics of gradients of the same objective at nearby points, and the slow
correction is one more step along that trajectory (what a plain implementation that only rewrites the parameters
does). ``restore`` puts back the optimizer state saved before the fast trajectory, so the slow correction is taken with
the moments of earlier batches only, as if the fast trajectory had been a look-ahead (costs one copy of the optimizer
state). With SGD without momentum the two agree. The learning-rate schedule advances once per optimizer step, fast
steps included (``AlgorithmConfig.optimizer_steps_per_update`` counts them).

Nothing persists between updates (θ_0 and the optimizer snapshot live within one call of ``run_update``), so a
schedule adds no checkpoint state.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import torch
from torch import nn

from genalign.algorithms.update_schedules import UPDATE_SCHEDULES


def check_slow_fast_args(*, inner_epochs: int, fast_steps: Any, alpha: Any, optimizer_state: Any) -> None:
    """Raise ValueError naming the field when an SFPO hyper-parameter is out of range."""
    if inner_epochs != 1:
        raise ValueError(
            f"algorithm.inner_epochs = {inner_epochs}, but update_schedule = 'sfpo' sets the passes itself "
            "(algorithm.update_schedule.fast_steps + 1); set algorithm.inner_epochs=1."
        )
    if isinstance(fast_steps, bool) or not isinstance(fast_steps, int) or fast_steps < 1:
        raise ValueError(f"algorithm.update_schedule.fast_steps = {fast_steps!r} must be an integer >= 1.")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        raise ValueError(f"algorithm.update_schedule.alpha = {alpha!r} must be a number in [0, 1].")
    if optimizer_state not in ("keep", "restore"):
        raise ValueError(
            f"algorithm.update_schedule.optimizer_state = {optimizer_state!r} must be 'keep' or 'restore'."
        )


@UPDATE_SCHEDULES.register(
    "sfpo",
    formula="K fast passes θ_0→θ_K on the batch; θ̃ = θ_0 + α(θ_K − θ_0); one slow pass from θ̃",
    source="[222] SFPO",
    summary="Slow-fast update: fast trajectory, reposition towards the start, slow correction (K + 1 passes).",
)
class SlowFastSchedule:
    """[222] SFPO: ``fast_steps`` passes (the fast trajectory), the reposition ``θ ← θ_0 + α(θ − θ_0)`` of every
    trainable parameter, then one more pass (the slow correction): ``fast_steps + 1`` passes in all.

    Reading chosen: a fast "inner step" is one pass over the batch (``algorithm.minibatches`` optimizer steps, one
    with the default single minibatch), so the schedule composes with minibatching; ``α`` interpolates every trainable
    parameter alike. ``fast_steps = 3`` and ``alpha = 0.8`` are genalign's defaults (the abstract gives no values);
    ``α = 1`` is ``K + 1`` standard passes and ``α = 0`` (with SGD) one standard pass. Optimizer state at the
    reposition: see the module docstring.

    Args:
        parameters: the trainable parameters (the optimizer's), local shards under sharded training.
        optimizer: the run's optimizer (its state is snapshot for ``optimizer_state = "restore"``).
        inner_epochs: must be 1 (the schedule sets the passes itself).
        fast_steps: ``K >= 1``, passes of the fast trajectory.
        alpha: ``α`` in ``[0, 1]``, how far along the fast trajectory the reposition lands.
        optimizer_state: ``keep`` or ``restore`` (module docstring).
    """

    def __init__(
        self,
        parameters: list[nn.Parameter],
        optimizer: torch.optim.Optimizer,
        *,
        inner_epochs: int,
        fast_steps: int = 3,
        alpha: float = 0.8,
        optimizer_state: Literal["keep", "restore"] = "keep",
    ) -> None:
        self.passes = self.count_passes(
            inner_epochs=inner_epochs, fast_steps=fast_steps, alpha=alpha, optimizer_state=optimizer_state
        )
        self.fast_steps, self.alpha, self.optimizer_state = fast_steps, float(alpha), optimizer_state
        self.parameters, self.optimizer = parameters, optimizer
        self.start = [param.detach().clone() for param in parameters]  # θ_0
        self.saved_state = copy.deepcopy(optimizer.state_dict()) if optimizer_state == "restore" else None
        self.displacement = 0.0

    def after_pass(self, index: int) -> None:
        if index != self.fast_steps - 1:
            return
        with torch.no_grad():
            squared = 0.0
            for param, start in zip(self.parameters, self.start, strict=True):
                squared += float((param.detach().float() - start.float()).pow(2).sum())
                param.lerp_(start, 1.0 - self.alpha)  # θ_0 + α(θ_K − θ_0) = θ_K + (1 − α)(θ_0 − θ_K)
        self.displacement = squared**0.5
        if self.saved_state is not None:
            self.optimizer.load_state_dict(self.saved_state)

    @classmethod
    def count_passes(
        cls, *, inner_epochs: int, fast_steps: int = 3, alpha: float = 0.8, optimizer_state: str = "keep"
    ) -> int:
        """``fast_steps + 1``, after checking the hyper-parameters (ValueError naming the field)."""
        check_slow_fast_args(inner_epochs=inner_epochs, fast_steps=fast_steps, alpha=alpha,
                             optimizer_state=optimizer_state)  # fmt: skip
        return fast_steps + 1

    def metrics(self) -> dict[str, float]:
        """``sfpo/fast_displacement``: ``‖θ_K − θ_0‖`` over this process's trainable parameters (local shards)."""
        return {"sfpo/fast_displacement": self.displacement}
