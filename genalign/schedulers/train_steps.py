"""Which denoising steps are stochastic (SDE) and which are trained.

A rollout of ``S`` steps gets two boolean masks ``[N, S]``: ``sde`` (the transition is sampled from a Gaussian and has
a log-probability) and ``trained`` (the step is an action of the policy-gradient loss; always a subset of ``sde``).
Strategies (shared/reference/formulas.md §5):

* ``all``: every step (Flow-GRPO trains all, or ``fraction`` 0.9 of the steps: the first 9 of 10 [319]);
* ``first_k``: the first ``k`` steps, or ``first_fraction``: the first ``round(fraction * S)`` steps;
* ``random_subset``: a random ``fraction`` of the steps, drawn per sample (DanceGRPO trains a random 60 %);
* ``sliding_window``: ``window_size`` consecutive steps starting at ``window_stride * (iteration // advance_every)``,
  clamped to ``max_start`` (MixGRPO: window 4 over 25 steps; ODE elsewhere gives ~50 % less training time);
* ``random_early_window``: a window of ``window_size`` steps at a random start inside the first ``early_fraction`` of
  the steps, one start per batch (Flow-GRPO-Fast);
* ``weighted_chunks``: the steps are cut into chunks of ``chunk_size`` consecutive steps and ``num_chunks`` distinct
  chunks are drawn per batch with probabilities proportional to ``chunk_weights`` (Chunk-GRPO's weighted sampling
  [70]; pair it with ``algorithm.ratio_level: chunk``).

``stochastic = "all"`` keeps SDE steps outside the trained set (Flow-GRPO, DanceGRPO); ``"trained"`` makes every other
step a deterministic ODE step (MixGRPO, Flow-GRPO-Fast). "Denoising reduction" (train with fewer sampling steps than
evaluation) is the policy's ``num_steps`` / ``eval_num_steps``, not a mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from genalign.algorithms.ratio_levels.chunks import chunk_ids, weighted_chunk_mask
from genalign.schedulers.options import TrainStepsConfig, TrainStepStrategy  # noqa: F401  (defined without torch)


@dataclass
class StepMasks:
    """Boolean masks ``[N, S]``: ``sde`` (stochastic transitions) and ``trained`` (actions; a subset of ``sde``)."""

    sde: Tensor
    trained: Tensor


def _window(num_steps: int, start: int, size: int) -> Tensor:
    steps = torch.arange(num_steps)  # [S]
    return (steps >= start) & (steps < start + size)  # [S]


def sliding_window_start(config: TrainStepsConfig, *, num_steps: int, iteration: int) -> int:
    """MixGRPO window start: ``stride * (iteration // advance_every)`` clamped to ``max_start``."""
    last = num_steps - config.window_size if config.max_start is None else config.max_start
    return max(0, min(config.window_stride * (iteration // config.advance_every), last))


def select_train_steps(
    config: TrainStepsConfig,
    *,
    num_steps: int,
    num_samples: int,
    iteration: int = 0,
    generator: torch.Generator | None = None,
) -> StepMasks:
    """Masks for a batch of ``num_samples`` rollouts of ``num_steps`` steps at training ``iteration``.

    Returns:
        :class:`StepMasks` with ``sde`` and ``trained`` of shape ``[num_samples, num_steps]`` (bool, CPU).
    """
    if config.window_size > num_steps and config.strategy in ("sliding_window", "random_early_window"):
        raise ValueError(
            f"train_steps.window_size={config.window_size} exceeds num_steps={num_steps}; use a smaller window."
        )
    shape = (num_samples, num_steps)
    if config.strategy == "all":
        trained = torch.ones(shape, dtype=torch.bool)
    elif config.strategy == "first_k":
        trained = _window(num_steps, 0, min(config.k, num_steps)).expand(shape).clone()
    elif config.strategy == "first_fraction":
        count = max(1, round(config.fraction * num_steps))
        trained = _window(num_steps, 0, count).expand(shape).clone()
    elif config.strategy == "random_subset":
        count = max(1, round(config.fraction * num_steps))
        order = torch.rand(shape, generator=generator).argsort(dim=1)  # [N, S] random permutation per sample
        trained = torch.zeros(shape, dtype=torch.bool).scatter(1, order[:, :count], True)  # [N, S]
    elif config.strategy == "sliding_window":
        start = sliding_window_start(config, num_steps=num_steps, iteration=iteration)
        trained = _window(num_steps, start, config.window_size).expand(shape).clone()
    elif config.strategy == "weighted_chunks":
        chunks = chunk_ids(num_steps, chunk_size=config.chunk_size)  # [S]
        count = int(chunks.max()) + 1
        weights = config.chunk_weights if config.chunk_weights is not None else [1.0] * count
        if len(weights) != count:
            raise ValueError(
                f"train_steps.chunk_weights has {len(weights)} entries but {num_steps} steps in chunks of "
                f"{config.chunk_size} make {count} chunks; give one weight per chunk."
            )
        picked = weighted_chunk_mask(chunks, list(weights), num_trained=config.num_chunks, generator=generator)
        trained = picked.expand(shape).clone()
    elif config.strategy == "random_early_window":
        last_start = max(0, int(config.early_fraction * num_steps) - config.window_size)
        start = int(torch.randint(0, last_start + 1, (1,), generator=generator).item())
        trained = _window(num_steps, start, config.window_size).expand(shape).clone()
    else:
        raise ValueError(f"train_steps.strategy={config.strategy!r} is unknown.")
    sde = trained.clone() if config.stochastic == "trained" else torch.ones(shape, dtype=torch.bool)
    return StepMasks(sde=sde, trained=trained)
