"""Reward functions: plain callables ``f(prompts, completions, **columns) -> list[float | None]``.

``prompts`` are the prompt strings of the batch (``[N]``), ``completions`` what the policy produced (``[N]``: strings,
PIL images, videos as ``[F, H, W, 3]`` uint8 arrays), and ``columns`` every other dataset column, each a list of
length ``N``. ``None`` means "not applicable to this sample": it is excluded from group statistics and the sample gets
zero advantage from that reward.

The registry holds *factories*: ``REWARDS.get(name)(**args)`` returns the callable, so a config can pass arguments
(a weights path, a regex, a target length). Heavy dependencies are imported inside the factory, never at module import.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from genalign.registry import Registry


class RewardFn(Protocol):
    def __call__(
        self, prompts: Sequence[str], completions: Sequence[Any], **columns: Sequence[Any]
    ) -> list[float | None]: ...


#: name -> factory ``(**args) -> RewardFn``
REWARDS: Registry[Callable[..., RewardFn]] = Registry("reward function")


def register_reward(name: str, **meta) -> Callable:
    """Register a reward.

    Decorating a plain reward function registers a factory that binds config ``args`` as keyword arguments::

        @register_reward("exact_match")
        def exact_match(prompts, completions, answer, *, strip=True): ...

    Decorating a class registers the class itself (its ``__init__`` takes the args, its ``__call__`` scores).
    """

    def decorator(obj):
        if isinstance(obj, type):
            REWARDS.register(name, **meta)(obj)
            return obj

        @functools.wraps(obj)
        def factory(**args):
            return functools.partial(obj, **args) if args else obj

        REWARDS.register(name, **meta)(factory)
        return obj

    return decorator
