"""Reward functions and reward models (see :mod:`genalign.rewards.base` for the calling convention)."""

from genalign.rewards import (  # noqa: F401
    clip,
    image,
    preference_models,
    text,
    vlm,
)
from genalign.rewards.base import REWARDS, RewardFn, register_reward

__all__ = ["REWARDS", "RewardFn", "register_reward"]
