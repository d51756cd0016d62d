"""The step batch: every per-sample ``[N]`` and per-action ``[N, T]`` signal of one step, keyed by declared names.

The trainer builds one :class:`StepBatch` per step (the mask, groups and behaviour log-probs of the rollout, its
structure, the features of a scoring pass before the update, rewards, advantages, progress) and slices it for
minibatches and micro-batches with :meth:`StepBatch.select`. Every registry function that reads more than its main
tensor receives the batch and takes what its registry meta ``needs`` declare (``batch.require(name, option)``); the
trainer never names a feature. Values are constants: a batch never carries gradient (the current scoring pass's
features come in the :class:`~genalign.algorithms.scores.ScoreOutput`).

Calling a rule yourself::

    batch = StepBatch(mask=mask, group_ids=group_ids, sample_advantages=adv, entropy=entropy)  # [N, T], [N], ...
    per_action = CREDIT_RULES.get("entropy_weighted")(adv[:, None].expand_as(mask), batch, alpha=0.5)  # [N, T]
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from genalign.algorithms.signals import SIGNALS, check_value, select_value, signal

#: How a caller provides a core step signal, for error messages of direct calls.
_HOW_TO_PROVIDE = {
    "progress": "StepBatch(progress=step / max_steps)",
    "phase": "StepBatch(phase=p) with the update phase being run (the trainer does for objectives with meta phases > 1)",
    "old_logp": "StepBatch(old_logp=[N, T]) with the log-probs of the policy that sampled the batch",
    "behaviour_logp": "StepBatch(behaviour_logp=[N, T]) with the rollout engine's log-probs of the sampled actions",
    "group_reward_std": "StepBatch(group_reward_std=[N]) (genalign.algorithms.group_reward_std(rewards, group_ids))",
}


class StepBatch(Mapping[str, Any]):
    """Declared signals of ``N`` samples (immutable). ``None`` values are dropped: a missing signal is absent.

    Args:
        values / named: signal name -> value; each is checked against its declaration
            (:func:`genalign.algorithms.signals.check_value`): the sample axis of every value agrees, and so does the
            action axis of every per-action value.
    """

    def __init__(self, values: Mapping[str, Any] | None = None, /, **named: Any) -> None:
        data = {name: value for name, value in {**(values or {}), **named}.items() if value is not None}
        samples = actions = None
        anchor = data.get("mask")  # the sizes come from the mask, else from the first per-sample tensor
        if isinstance(anchor, Tensor) and anchor.dim() == 2:
            samples, actions = anchor.shape
        for name, value in data.items():
            spec = signal(name)
            if samples is None and spec.axes and spec.value_type is None and isinstance(value, Tensor):
                samples = value.shape[0]
        for name, value in data.items():
            shown = check_value(name, value, samples=samples, actions=actions, where="StepBatch")
            actions = shown if actions is None else actions
        self._data = data
        self._samples = samples
        self._actions = actions

    # -- mapping --------------------------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        return self._data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        shapes = {k: list(v.shape) if isinstance(v, Tensor) else type(v).__name__ for k, v in self._data.items()}
        return f"StepBatch(N={self._samples}, T={self._actions}, {shapes})"

    # -- reading --------------------------------------------------------------------------------------------------
    @property
    def size(self) -> int | None:
        """``N``, the number of samples (None for a batch of scalars only)."""
        return self._samples

    @property
    def num_actions(self) -> int | None:
        """``T``, the length of the action axis (None when no per-action signal is present)."""
        return self._actions

    @property
    def mask(self) -> Tensor:
        """``[N, T]`` 1 where an action is trained (required)."""
        return self.require("mask", "this step")

    @property
    def group_ids(self) -> Tensor:
        """``[N]`` the group of each sample (required)."""
        return self.require("group_ids", "this step")

    def require(self, name: str, option: str) -> Any:
        """The value of ``name``, or a ``ValueError`` naming ``option``, the signal and how it is provided."""
        value = self._data.get(name)
        if value is None:
            spec = signal(name)
            how = _HOW_TO_PROVIDE.get(name, f"StepBatch({name}={spec.shape_text})")
            raise ValueError(
                f"{option} needs the signal {name!r} ({spec.doc}), which this batch does not carry. The trainer "
                f"provides a signal an option lists in its registry meta 'needs' (and the policy family supplies); "
                f"when calling it yourself pass {how}."
            )
        return value

    # -- new batches ----------------------------------------------------------------------------------------------
    def select(self, index: Sequence[int] | Tensor) -> StepBatch:
        """The samples at ``index`` (``[n]`` long); scalars are kept."""
        idx = torch.as_tensor(index, dtype=torch.long)
        return StepBatch({name: select_value(value, idx) for name, value in self._data.items()})

    def with_values(self, values: Mapping[str, Any] | None = None, /, **named: Any) -> StepBatch:
        """A batch with ``values`` added (replacing entries of the same name; ``None`` removes one)."""
        merged = dict(self._data)
        for name, value in {**(values or {}), **named}.items():
            if value is None:
                merged.pop(name, None)
            else:
                merged[name] = value
        return StepBatch(merged)

    def only(self, names: frozenset[str] | set[str]) -> StepBatch:
        """A batch of the entries named in ``names``."""
        return StepBatch({name: value for name, value in self._data.items() if name in names})

    def to(self, device: torch.device | str) -> StepBatch:
        """Every tensor on ``device``."""
        return StepBatch({k: v.to(device) if isinstance(v, Tensor) else v for k, v in self._data.items()})


def declared_names() -> frozenset[str]:
    """Every declared signal name."""
    return frozenset(SIGNALS)


def require(batch: StepBatch | None, name: str, option: str) -> Any:
    """``batch.require(name, option)``, also when the caller passed no batch at all."""
    return (batch if batch is not None else StepBatch()).require(name, option)
