"""Guards against training on garbage: non-finite values skip an update (the optimizer state untouched) and stop the
run after ``run.max_consecutive_skips``; parameters that become non-finite stop it at once, before any checkpoint; and
collapse detectors turn silent failures into logged warnings (entropy pinned at its extreme, no reward spread for
many steps, exploding weights).

Every check is one fused reduction over a list of tensors (the max-abs norm of each, which is NaN/inf exactly when
the tensor holds a NaN/inf and never overflows), cheap next to a forward pass. Under sharded training each process
checks its shards and the processes agree on one answer, so they skip or stop together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from genalign.errors import UserError
from genalign.trainer.distributed import all_true, full_value, local_part


class NonFiniteTrainingError(UserError, FloatingPointError):
    """Training produced NaN/inf where the run cannot continue; the message names the step and what to do."""


def all_finite(tensors: list[Tensor]) -> bool:
    """Whether every tensor of the list is free of NaN and inf, in every process (a collective call)."""
    local = [local_part(t.detach()) for t in tensors if t is not None and t.is_floating_point()]
    local = [t for t in local if t.numel()]
    finite = not local or bool(torch.stack([n.float() for n in torch._foreach_norm(local, math.inf)]).isfinite().all())
    return all_true(finite)


def global_norm(tensors: list[Tensor]) -> float:
    """The 2-norm of all ``tensors`` together; sharded tensors count once, whatever their layout (collective)."""
    norms = [full_value(torch.linalg.vector_norm(tensor.detach().float())) for tensor in tensors]
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0


def optimizer_state_tensors(optimizer: torch.optim.Optimizer) -> list[Tensor]:
    return [value for state in optimizer.state.values() for value in state.values() if isinstance(value, Tensor)]


def update_is_finite(loss_sum: float, grad_norm: float, optimizer: torch.optim.Optimizer) -> str | None:
    """``None`` when an optimizer step may be taken, else what is non-finite (the same answer in every process)."""
    if not all_true(math.isfinite(loss_sum)):
        return f"the loss is {loss_sum}"
    if not math.isfinite(grad_norm):
        return f"the gradient norm is {grad_norm}"
    if not all_finite(optimizer_state_tensors(optimizer)):
        return "the optimizer state holds NaN/inf"
    return None


def check_parameters(parameters: list[nn.Parameter]) -> None:
    """Raise :class:`NonFiniteTrainingError` when an optimizer step left NaN/inf in the parameters."""
    if not all_finite(list(parameters)):
        raise NonFiniteTrainingError(
            "the parameters hold NaN/inf after an optimizer step (an exploding update: lower optim.lr, keep "
            "optim.max_grad_norm set, or check the rewards' scale); the run stops before writing a checkpoint."
        )


@dataclass
class CollapseMonitor:
    """Warnings for failures that produce no error: the entropy at an extreme (a collapsed, uniform or one-hot
    output), no reward spread for ``patience`` steps (no learning signal), weights growing ``growth`` times their
    initial norm."""

    patience: int = 10
    growth: float = 100.0
    initial_entropy: float | None = None
    initial_norm: float | None = None
    flat_steps: int = 0
    warned: set[str] = field(default_factory=set)

    def check(self, step: int, record: dict, parameters: list[nn.Parameter]) -> list[str]:
        """Warnings for ``step`` (each kind once per run); adds ``guard/weight_norm`` to ``record``."""
        norm = global_norm(parameters)
        record["guard/weight_norm"] = norm
        self.initial_norm = self.initial_norm or norm
        entropy = record.get("entropy")
        if entropy is not None and math.isfinite(entropy) and self.initial_entropy is None:
            self.initial_entropy = entropy
        self.flat_steps = self.flat_steps + 1 if record.get("reward/std", 1.0) == 0 else 0
        found = []
        if self.initial_norm and norm > self.growth * self.initial_norm:
            found.append(
                ("weights", f"the weight norm grew {norm / self.initial_norm:.0f}x since step 1 (lower optim.lr)")
            )
        if self.flat_steps >= self.patience:
            found.append(("flat", f"every reward of the last {self.flat_steps} steps was equal: no learning signal"))
        if entropy is not None and self.initial_entropy and math.isfinite(entropy):
            if entropy > 10 * self.initial_entropy:
                found.append(
                    (
                        "entropy_up",
                        f"entropy {entropy:.3g} is 10x its first value: the outputs may have collapsed to noise",
                    )
                )
            elif entropy < 0.01 * self.initial_entropy:
                found.append(
                    (
                        "entropy_down",
                        f"entropy {entropy:.3g} is 1 % of its first value: the outputs may have collapsed to one answer",
                    )
                )
        messages = [f"step {step}: warning: {text}" for kind, text in found if kind not in self.warned]
        self.warned |= {kind for kind, _ in found}
        return messages
