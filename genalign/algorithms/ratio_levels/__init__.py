"""Ratio levels, one registry (:data:`RATIO_LEVELS`): standard, segment / prefix, power-mean and chunk levels; see
:mod:`genalign.algorithms.ratio_levels.base`."""

from genalign.algorithms.ratio_levels import chunks, future, segments, standard  # noqa: F401
from genalign.algorithms.ratio_levels.base import RATIO_LEVELS, ClipFn, LevelOutput, RatioLevel

__all__ = ["RATIO_LEVELS", "ClipFn", "LevelOutput", "RatioLevel"]
