"""Reward shapers: the registry :data:`REWARD_SHAPERS` and :func:`apply_reward_shaping`.

A reward shaper rewrites the combined reward of each sample before the advantage estimator sees it, from the rewards
of its group and the declared signals of the step batch, with one fixed signature::

    shaper(rewards [N], batch: StepBatch, **hp) -> (rewards [N], stats)

The advantage stage runs ``combine -> (KL in the reward) -> shapers in config order -> estimator`` over the global
batch (all processes): ``batch`` holds ``group_ids``, ``mask`` and the signals the shaper's registry meta ``needs``
declare (e.g. ``hidden``, from a scoring pass before the update), gathered from every process. A missing (NaN) reward
stays missing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.registry import Registry

RewardShaper = Callable[..., tuple[Tensor, dict[str, float]]]

#: name -> ``shaper(rewards [N], batch: StepBatch, **hp) -> (rewards [N], stats)``
REWARD_SHAPERS: Registry[RewardShaper] = Registry("reward shaper", catalogue="genalign.experimental.shaping")


def apply_reward_shaping(
    shapers: Sequence[tuple[str, Mapping[str, Any]]], rewards: Tensor, batch: StepBatch
) -> tuple[Tensor, dict[str, float]]:
    """Apply ``shapers`` (``(name, hyper-parameters)`` pairs) in order to the combined ``rewards`` ``[N]``; returns the
    shaped rewards ``[N]`` and the shapers' statistics (unchanged rewards and no statistics without a shaper)."""
    stats: dict[str, float] = {}
    for name, hp in shapers:
        rewards, extra = REWARD_SHAPERS.get(name)(rewards, batch, **hp)
        stats.update(extra)
    return rewards, stats


def shaper_needs(names: Sequence[str]) -> frozenset[str]:
    """The union of the ``needs`` meta of reward shapers ``names``."""
    return frozenset(need for name in names for need in REWARD_SHAPERS.meta(name).get("needs", ()))
