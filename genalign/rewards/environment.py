"""The ``environment`` reward: the episode reward of a multi-turn rollout's environment.

A multi-turn rollout (``policy.multi_turn``) puts each sample's episode reward (``Environment.reward()``, None when the
environment owns none) in the row column ``environment_reward``. This reward returns it; where the environment owns
none, the ``fallback`` reward scores the sample instead (the completion it receives is the whole transcript after the
prompt: the model's turns and the environment's rendered messages), else the sample gets None (not applicable).

In a config::

    rewards:
      - fn: environment                      # the environment's reward
        args: {fallback: exact_match}        # ... or, for episodes without one, this reward
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from genalign.rewards.base import register_reward, reward_factory

#: the row column a multi-turn rollout fills (genalign.policies.lm.multi_turn.ENVIRONMENT_REWARD_COLUMN)
COLUMN = "environment_reward"


@register_reward("environment", source="rule", inner_rewards=({"spec": "fallback"},))
class EnvironmentReward:
    """The environment's episode reward; the ``fallback`` reward where the environment owns none.

    Args:
        fallback: a reward (registered name, import path, or ``{fn: ..., args: {...}}``) for samples whose
            environment owns no reward; None: those samples get None.
    """

    def __init__(self, *, fallback: str | Mapping[str, Any] | None = None) -> None:
        self.fallback = None
        if fallback is not None:
            fn, args = (
                (fallback.get("fn"), dict(fallback.get("args", {})))
                if isinstance(fallback, Mapping)
                else (fallback, {})
            )
            if fn is None:
                raise ValueError(f"environment reward: fallback {dict(fallback)!r} needs an 'fn' key.")
            self.fallback = reward_factory(fn)(**args)

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Sequence[Any]) -> list:
        values = list(columns.get(COLUMN) or [None] * len(completions))
        missing = [i for i, value in enumerate(values) if value is None]
        if missing and self.fallback is not None:
            picked = {key: [column[i] for i in missing] for key, column in columns.items()}
            scores = self.fallback([prompts[i] for i in missing], [completions[i] for i in missing], **picked)
            for i, score in zip(missing, scores, strict=True):
                values[i] = score
        return [None if value is None else float(value) for value in values]


__all__ = ["EnvironmentReward"]
