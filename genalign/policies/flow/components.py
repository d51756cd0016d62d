"""Small components of the flow policy: the parameter average (EMA of the weights for evaluation, and the "old" model
of DiffusionNFT) and the LRU cache of prompt embeddings."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from genalign.pipelines.architectures.base import PromptEmbeddings
from genalign.policies.sharding import release_gathered


class ParameterAverage:
    """An exponential moving average of a module's trainable parameters, kept in float32.

    ``update()`` after each optimizer step: ``avg <- decay · avg + (1 − decay) · θ``. Inside ``with average.applied():``
    the parameters hold the average; the live values are restored on exit (the average itself is never rounded to the
    parameters' dtype). Used for the EMA of the trainable weights (evaluation) and for DiffusionNFT's "old" model.

    Under sharded training the averages are sharded like the parameters (:meth:`reset` after sharding), and
    :meth:`applied` must be entered while the parameters are sharded: it swaps the shards and releases gathered
    parameters on entry and exit, so forward passes inside gather the average and passes after it the live values.
    """

    def __init__(self, module: nn.Module, decay: float) -> None:
        if not 0 <= decay < 1:
            raise ValueError(f"decay={decay} must be in [0, 1).")
        self.module = module
        self.decay = decay
        self.reset()

    def reset(self) -> None:
        """Start the average at the current trainable parameters (again after they were sharded)."""
        self.parameters = [p for p in self.module.parameters() if p.requires_grad]
        self.average = [p.detach().float().clone() for p in self.parameters]

    @torch.no_grad()
    def update(self) -> None:
        for average, param in zip(self.average, self.parameters, strict=True):
            average.mul_(self.decay).add_(param.detach().float(), alpha=1 - self.decay)

    @contextmanager
    def applied(self) -> Iterator[None]:
        """Inside the block the parameters hold the average. The values are swapped through ``.data``, so an autograd
        graph built before the block (DiffusionNFT scores the current velocity first) stays valid: it sees the live
        values again when it runs backward."""
        live = [p.detach().clone() for p in self.parameters]
        release_gathered(self.module)
        for param, average in zip(self.parameters, self.average, strict=True):
            param.data.copy_(average.to(param.dtype))
        try:
            yield
        finally:
            release_gathered(self.module)
            for param, value in zip(self.parameters, live, strict=True):
                param.data.copy_(value)

    def state_dict(self) -> dict[str, Any]:
        return {"average": [a.clone() for a in self.average]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        averages = state["average"]
        if len(averages) != len(self.parameters):
            raise ValueError(
                f"the saved average has {len(averages)} tensors; this model trains {len(self.parameters)}."
            )
        self.average = [a.float().clone() for a in averages]


class PromptEmbeddingCache:
    """Embeddings of prompts, each distinct prompt encoded once, on its own (its embedding depends on the prompt alone,
    not on the prompts it was requested with), and kept in an LRU cache of ``size`` prompts (SD3.5 embeddings are a few
    MB each).

    Args:
        encode: ``encode(prompts) -> (cond, uncond | None)`` with ``[B, ...]`` tensors per key.
        size: prompts kept.
    """

    def __init__(
        self, encode: Callable[[list[str]], tuple[PromptEmbeddings, PromptEmbeddings | None]], size: int
    ) -> None:
        self.encode = encode
        self.size = size
        self.entries: OrderedDict[str, tuple[PromptEmbeddings, PromptEmbeddings | None]] = OrderedDict()

    def __call__(self, prompts: list[str]) -> tuple[PromptEmbeddings, PromptEmbeddings | None]:
        """Conditional and unconditional embeddings ``[N, ...]`` of ``prompts`` (in order, repeats allowed)."""
        distinct = list(dict.fromkeys(prompts))
        missing = [p for p in distinct if p not in self.entries]
        for prompt in missing:
            # one prompt per call: the text encoders' batched matmuls round differently with the batch size, so an
            # embedding encoded among other prompts would differ in its last bits from one encoded alone, and a run
            # resumed with an empty cache would no longer reproduce the uninterrupted run
            self.entries[prompt] = self.encode([prompt])
        for prompt in distinct:
            self.entries.move_to_end(prompt)
        pairs = [self.entries[p] for p in prompts]
        cond = {k: torch.cat([c[k] for c, _ in pairs]) for k in pairs[0][0]}
        uncond = None if pairs[0][1] is None else {k: torch.cat([u[k] for _, u in pairs]) for k in pairs[0][1]}
        while len(self.entries) > max(self.size, len(distinct)):
            self.entries.popitem(last=False)
        return cond, uncond

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)


__all__ = ["ParameterAverage", "PromptEmbeddingCache"]
