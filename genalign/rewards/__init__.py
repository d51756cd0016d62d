"""Reward functions and reward models (see :mod:`genalign.rewards.base` for the calling convention)."""

from genalign.rewards.base import REWARDS, RewardFn, register_reward
from genalign.rewards import text  # noqa: F401
from genalign.rewards import vlm  # noqa: F401

__all__ = ["REWARDS", "RewardFn", "register_reward"]
