"""Reward functions and reward models (see :mod:`genalign.rewards.base` for the calling convention)."""

from genalign.rewards import (  # noqa: F401
    clip,
    code_execution,
    image,
    preference_models,
    text,
    vlm,
)
from genalign.rewards.base import REWARDS, RewardFn, register_reward
from genalign.rewards.math_answers import equivalence  # noqa: F401  (registers 'math_equivalence')

__all__ = ["REWARDS", "RewardFn", "register_reward"]
