"""Reward functions and reward models (see :mod:`genalign.rewards.base` for the calling convention)."""

from genalign.rewards import (  # noqa: F401
    caption_views,
    chains,
    clip,
    code_execution,
    comparative,
    environment,
    image,
    image_edit,
    judge,
    labels,
    multiple_choice,
    necessary_tools,
    preference_models,
    prefix_gains,
    ranking,
    remote,
    reward_models,
    rubric,
    semantic,
    text,
    token_judges,
    tool_use,
    verification,
    video,
    vlm,
)
from genalign.rewards.base import REWARDS, RewardFn, callable_reference, register_reward, reward_factory
from genalign.rewards.math_answers import equivalence, math_verify_grader  # noqa: F401  (math rewards)

__all__ = ["REWARDS", "RewardFn", "callable_reference", "register_reward", "reward_factory"]
