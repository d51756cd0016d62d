"""The image token grid of architectures whose transformer takes packed latent tokens ``[B, rows * cols, C]`` and
needs the grid itself (position ids, ``img_shapes``): Qwen-Image, FLUX.2.

The grid is set when the initial latents are made (from the configured height and width) and read by every velocity
call on latents of that many tokens, so that scoring stored latents and planning without a sample see the same grid;
without a sample of that size, a square grid is assumed.
"""

from __future__ import annotations

import math


class TokenGrid:
    """``rows x cols`` of the latest sampled latents (module docstring)."""

    def __init__(self) -> None:
        self.rows, self.cols = 0, 0

    def set(self, rows: int, cols: int) -> None:
        self.rows, self.cols = rows, cols

    def of(self, tokens: int, model: str) -> tuple[int, int]:
        """``(rows, cols)`` of latents with ``tokens`` tokens: the sampled grid, or a square one."""
        if self.rows * self.cols == tokens:
            return self.rows, self.cols
        side = math.isqrt(tokens)
        if side * side != tokens:
            raise ValueError(
                f"{model} latents with {tokens} tokens do not match the last sampled grid {self.rows}x{self.cols} "
                "and are not square; make the initial latents (which sets the grid) before scoring them."
            )
        return side, side
