"""The sampler settings a config chooses, importable without torch (config checks read them): which flow-matching
steps are stochastic and trained (:class:`TrainStepsConfig`, used by :mod:`genalign.schedulers.train_steps`), the
names of the ODE solvers (:data:`OdeSolverName`, :mod:`genalign.schedulers.ode_solvers`) and the rules of a masked
diffusion generation (:func:`check_generation_args`, :mod:`genalign.schedulers.masked_diffusion`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

#: Names of the registered solvers (config fields use this ``Literal``).
OdeSolverName = Literal["euler", "ab2"]

TrainStepStrategy = Literal[
    "all", "first_k", "first_fraction", "random_subset", "sliding_window", "random_early_window", "weighted_chunks"
]


@dataclass
class TrainStepsConfig:
    """Which sampling steps are stochastic and trained."""

    strategy: TrainStepStrategy = field(
        default="all", metadata={"help": "How trained steps are chosen (see module doc)."}
    )
    stochastic: Literal["all", "trained"] = field(
        default="all",
        metadata={"help": "'all': SDE at every step; 'trained': SDE only on trained steps, ODE elsewhere."},
    )
    k: int = field(default=1, metadata={"help": "Number of first steps trained by strategy 'first_k'."})
    fraction: float = field(
        default=0.6, metadata={"help": "Fraction of steps for 'first_fraction' and 'random_subset' (0 < f <= 1)."}
    )
    window_size: int = field(default=4, metadata={"help": "Consecutive trained steps of the window strategies."})
    advance_every: int = field(
        default=25, metadata={"help": "'sliding_window': iterations between two moves of the window."}
    )
    window_stride: int = field(default=1, metadata={"help": "'sliding_window': steps the window moves each time."})
    max_start: int | None = field(
        default=None, metadata={"help": "'sliding_window': last start position (None = num_steps - window_size)."}
    )
    early_fraction: float = field(
        default=0.5, metadata={"help": "'random_early_window': the window lies inside this first fraction of steps."}
    )
    chunk_size: int = field(default=2, metadata={"help": "'weighted_chunks': consecutive steps per chunk."})
    chunk_weights: list[float] | None = field(
        default=None,
        metadata={
            "help": "'weighted_chunks': sampling weight of each chunk (None = uniform), e.g. more on early chunks."
        },
    )
    num_chunks: int = field(default=1, metadata={"help": "'weighted_chunks': chunks trained per batch."})

    def validate(self) -> None:
        if self.strategy not in get_args(TrainStepStrategy):
            raise ValueError(f"train_steps.strategy={self.strategy!r} is unknown.")
        if self.stochastic not in ("all", "trained"):
            raise ValueError(f"train_steps.stochastic={self.stochastic!r} must be 'all' or 'trained'.")
        if self.chunk_size < 1 or self.num_chunks < 1:
            raise ValueError(f"train_steps.chunk_size={self.chunk_size} and num_chunks={self.num_chunks} must be >= 1.")
        if self.k < 1:
            raise ValueError(f"train_steps.k={self.k} must be >= 1.")
        if not 0 < self.fraction <= 1:
            raise ValueError(f"train_steps.fraction={self.fraction} must be in (0, 1].")
        if self.window_size < 1 or self.advance_every < 1 or self.window_stride < 1:
            raise ValueError(
                f"train_steps.window_size={self.window_size}, advance_every={self.advance_every} and "
                f"window_stride={self.window_stride} must all be >= 1."
            )
        if self.max_start is not None and self.max_start < 0:
            raise ValueError(f"train_steps.max_start={self.max_start} must be >= 0 or None.")
        if not 0 < self.early_fraction <= 1:
            raise ValueError(f"train_steps.early_fraction={self.early_fraction} must be in (0, 1].")


def check_generation_args(*, gen_length: int, block_length: int, steps: int, mask_id: int | None) -> None:
    """Raise a ``ValueError`` naming the rule and the fix when a generation setting cannot work."""
    if mask_id is None:
        raise ValueError(
            "masked diffusion generation needs a mask token id, but the model/tokenizer defines none (mask_id=None). "
            "Set mask_token_id in the policy config (e.g. 126336 for LLaDA, 151666 for Dream) or add a mask token to "
            "the tokenizer."
        )
    if gen_length < 1 or block_length < 1 or steps < 1:
        raise ValueError(
            f"gen_length={gen_length}, block_length={block_length} and steps={steps} must all be positive integers."
        )
    if gen_length % block_length != 0:
        raise ValueError(
            f"block_length={block_length} must divide gen_length={gen_length} (the answer is cut into whole blocks); "
            f"choose a block_length among the divisors of {gen_length}, e.g. {_largest_divisor_at_most(gen_length, block_length)}."
        )
    num_blocks = gen_length // block_length
    if steps % num_blocks != 0:
        raise ValueError(
            f"steps={steps} must be divisible by the number of blocks gen_length/block_length={num_blocks} (every "
            f"block gets the same number of steps); use steps={max(num_blocks, steps - steps % num_blocks)} or "
            f"steps={steps + num_blocks - steps % num_blocks}."
        )
    if steps // num_blocks > block_length:
        raise ValueError(
            f"steps per block = steps/num_blocks = {steps // num_blocks} exceeds block_length={block_length}: a step "
            f"would commit no token. Use steps <= gen_length={gen_length}."
        )


def _largest_divisor_at_most(n: int, bound: int) -> int:
    return max(d for d in range(1, min(n, bound) + 1) if n % d == 0)


__all__ = ["OdeSolverName", "TrainStepStrategy", "TrainStepsConfig", "check_generation_args"]
