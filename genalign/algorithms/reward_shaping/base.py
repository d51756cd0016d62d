"""Reward shapers: the registry :data:`REWARD_SHAPERS`, its inputs and :func:`apply_reward_shaping`.

A reward shaper rewrites the combined reward of each sample before the advantage estimator sees it, from the rewards
of its group and declared per-sample inputs, with one fixed signature::

    shaper(rewards [N], inputs: ShapingInputs, **hp) -> (rewards [N], stats)

The trainer runs ``combine -> (KL in the reward) -> shapers in config order -> estimator`` over the global batch
(all processes). A shaper names what it reads in its registry meta ``needs`` (score features of
:class:`~genalign.algorithms.scores.ScoreRequest`, e.g. ``hidden`` for sequence embeddings), so a config is checked
against the policy family at load time; the trainer computes the per-sample inputs from a scoring pass before the
update. A missing (NaN) reward stays missing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from genalign.algorithms._validation import check_group_ids
from genalign.registry import Registry

RewardShaper = Callable[..., tuple[Tensor, dict[str, float]]]

#: name -> ``shaper(rewards [N], inputs: ShapingInputs, **hp) -> (rewards [N], stats)``
REWARD_SHAPERS: Registry[RewardShaper] = Registry("reward shaper")


@dataclass(frozen=True)
class ShapingInputs:
    """What a reward shaper may read besides the rewards; tensors are constants (detached).

    Attributes:
        group_ids: ``[N]`` group of each sample.
        embeddings: ``[N, H]`` float32 sequence embedding of each sample: the mean, over its valid actions, of the
            last hidden state predicting each action (score feature ``hidden`` of a scoring pass before the update);
            shapers needing ``hidden`` get it.
    """

    group_ids: Tensor
    embeddings: Tensor | None = None

    def __post_init__(self) -> None:
        n = self.group_ids.shape[0] if isinstance(self.group_ids, Tensor) else -1
        check_group_ids(self.group_ids, n)
        if self.embeddings is not None and (self.embeddings.ndim != 2 or self.embeddings.shape[0] != n):
            raise ValueError(f"ShapingInputs.embeddings must have shape [N, H] with N={n}, got {self.embeddings.shape}")

    def require(self, name: str, shaper: str) -> Any:
        """The field ``name`` or a ``ValueError`` that says how to provide it."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(
                f"reward shaper {shaper!r} needs ShapingInputs.{name}, which is None; the trainer provides it when the "
                f"shaper's registry meta lists its score feature in 'needs' (pass ShapingInputs({name}=...) when "
                "calling it yourself)."
            )
        return value


def apply_reward_shaping(
    shapers: Sequence[tuple[str, Mapping[str, Any]]], rewards: Tensor, inputs: ShapingInputs
) -> tuple[Tensor, dict[str, float]]:
    """Apply ``shapers`` (``(name, hyper-parameters)`` pairs) in order to the combined ``rewards`` ``[N]``; returns the
    shaped rewards ``[N]`` and the shapers' statistics (unchanged rewards and no statistics without a shaper)."""
    stats: dict[str, float] = {}
    for name, hp in shapers:
        rewards, extra = REWARD_SHAPERS.get(name)(rewards, inputs, **hp)
        stats.update(extra)
    return rewards, stats


def shaper_needs(names: Sequence[str]) -> frozenset[str]:
    """The union of the ``needs`` meta of reward shapers ``names``."""
    return frozenset(need for name in names for need in REWARD_SHAPERS.meta(name).get("needs", ()))
