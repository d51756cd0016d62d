"""Likelihood-free objectives for flow models: DiffusionNFT (shared/reference/formulas.md §5).

No step log-probability is needed: the scoring pass returns flow-matching predictions at ``K`` stored points per sample
(:class:`~genalign.algorithms.scores.VelocityPredictions`: the current velocity ``v_θ``, the "old" velocity of an
exponential moving average of the weights, and the target ``v* = ε − x_0``). The advantage becomes an optimality
probability ``r = 0.5 + 0.5 clip(A / c, −1, 1)``; the implicit positive and negative policies are
``v⁺ = β v_θ + (1 − β) v_old`` and ``v⁻ = (1 + β) v_old − β v_θ`` and the loss of each point is
``r |v⁺ − v*|² + (1 − r) |v⁻ − v*|²`` (mean over latent elements).
"""

from __future__ import annotations

from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.objectives.base import OBJECTIVES
from genalign.algorithms.scores import ScoreOutput, VelocityPredictions
from genalign.algorithms.signals import declare_signal

declare_signal("velocity", ("N",), "score", "Current, old-model and target velocities of flow-matching points.",
               source="DiffusionNFT (formulas.md §5)", dtype=None, value_type=VelocityPredictions, detached=False)  # fmt: skip


def element_mse(a: Tensor, b: Tensor) -> Tensor:
    """``[n]`` mean over latent elements of ``(a - b)^2``."""
    return ((a.float() - b.float()) ** 2).flatten(1).mean(dim=1)


def nft_loss(v_theta: Tensor, v_old: Tensor, target: Tensor, optimality: Tensor, *, beta: float) -> Tensor:
    """DiffusionNFT per-point loss ``[n]``: ``r |v+ - v*|^2 + (1 - r) |v- - v*|^2`` with
    ``v+ = beta v_theta + (1 - beta) v_old`` and ``v- = (1 + beta) v_old - beta v_theta`` (``optimality`` = ``r`` [n])."""
    positive = beta * v_theta + (1 - beta) * v_old  # [n, ...]
    negative = (1 + beta) * v_old - beta * v_theta  # [n, ...]
    return optimality * element_mse(positive, target) + (1 - optimality) * element_mse(negative, target)


def optimality_probability(advantages: Tensor, *, clip: float) -> Tensor:
    """``r = 0.5 + 0.5 clip(A / clip, -1, 1)`` in ``[0, 1]`` (same shape as ``advantages``)."""
    return 0.5 + 0.5 * (advantages.float() / clip).clamp(-1.0, 1.0)


@OBJECTIVES.register(
    "nft",
    needs=("velocity",),
    uses_old_logp=False,
    formula="r = ½ + ½·clip(A/c, −1, 1); L = r‖βv_θ + (1−β)v_old − v*‖² + (1−r)‖(1+β)v_old − βv_θ − v*‖²",
    source="DiffusionNFT (formulas.md §5)",
    summary="Likelihood-free: flow-matching loss on implicit positive / negative velocities, weighted by advantage.",
)
def diffusion_nft(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    beta: float = 1.0,
    advantage_clip: float = 1.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """DiffusionNFT per-point loss ``[n, K]`` from the score feature ``velocity``; every point of a sample shares its advantage
    (per-action advantages are averaged per sample). Metrics: ``nft/optimality_mean``, ``nft/loss``.

    Args:
        beta: guidance strength ``β > 0`` of ``v⁺ / v⁻``.
        advantage_clip: ``c > 0`` of the optimality mapping.
    """
    if not beta > 0:
        raise ValueError(f"beta={beta} must be > 0 (DiffusionNFT guidance strength, e.g. 1.0).")
    if not advantage_clip > 0:
        raise ValueError(f"advantage_clip={advantage_clip} must be > 0 (e.g. 1.0).")
    if "velocity" not in score:
        raise ValueError(
            "objective 'nft' needs the velocity predictions of the scoring pass (score feature 'velocity'); use the "
            "flow family with policy.likelihood_free.method='nft'."
        )
    velocity: VelocityPredictions = score["velocity"]
    v_theta, v_old, target = velocity.current, velocity.old, velocity.target  # [n, K, ...]
    adv = advantages.float()
    adv = adv.mean(dim=1) if adv.dim() == 2 else adv  # [n]; NFT credits the whole sample
    optimality = optimality_probability(adv, clip=advantage_clip).to(v_theta.device)  # [n]
    n, k = v_theta.shape[:2]
    loss = nft_loss(
        v_theta.flatten(0, 1), v_old.flatten(0, 1), target.flatten(0, 1), optimality.repeat_interleave(k), beta=beta
    ).view(n, k)  # [n, K]
    return loss, {"nft/optimality_mean": optimality.mean().detach(), "nft/loss": loss.mean().detach()}
