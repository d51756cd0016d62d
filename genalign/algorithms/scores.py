"""What the backend asks of a scoring pass and what it gets back: :class:`ScoreRequest` and :class:`ScoreOutput`.

A policy's ``score(rollout, request)`` re-scores stored actions under the current parameters and returns the
log-probabilities plus the *features* the request names: declared signals whose producer is ``score``
(:mod:`genalign.algorithms.signals`; ``entropy``, ``kl``, ``hidden``, ... and those the catalogue declares). A request
is a set of names, with a parameter for the features that take one (the KL estimator of ``kl``, the function of
``vocab_term``, the ``k`` of ``topk_logp``). Token-level features are computed inside the family's chunked head pass,
so ``[n, T, V]`` logits never exist. ``n`` samples, ``T`` actions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from torch import Tensor

from genalign.algorithms.signals import check_value, signal

#: ``fn(logits [k, V]) -> [k]``: a per-token function of the next-token logits at the sampling temperature.
VocabTerm = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class ScoreRequest:
    """The features a scoring pass should return besides ``logp``.

    Attributes:
        features: declared score-feature names.
        params: the parameter of a feature that takes one, by feature name (``{"kl": "k3", "topk_logp": 5,
            "vocab_term": fn}``; see each declaration's ``param``).
    """

    features: frozenset[str] = frozenset()
    params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", frozenset(self.features))
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))
        for name in self.features:
            if signal(name).producer != "score":
                raise ValueError(f"ScoreRequest: {name!r} is not a score feature (its producer is rollout or step)")
        unknown = sorted(set(self.params) - set(self.features))
        if unknown:
            raise ValueError(f"ScoreRequest: parameters for {unknown}, which are not requested features")

    @classmethod
    def of(cls, *names: str, **params: Any) -> ScoreRequest:
        """``ScoreRequest.of("entropy", kl="k3")``: the named features plus each parameterised one."""
        return cls(frozenset(names) | frozenset(params), params)

    def __contains__(self, name: object) -> bool:
        return name in self.features

    def param(self, name: str, default: Any = None) -> Any:
        """The parameter of feature ``name`` (``default`` when none was given)."""
        return self.params.get(name, default)

    def union(self, other: ScoreRequest) -> ScoreRequest:
        """Both requests' features; ``other``'s parameters win."""
        return ScoreRequest(self.features | other.features, {**self.params, **other.params})

    def without(self, names: Iterable[str]) -> ScoreRequest:
        names = set(names)
        return ScoreRequest(self.features - names, {k: v for k, v in self.params.items() if k not in names})


@dataclass(frozen=True)
class VelocityPredictions:
    """Flow-matching predictions at ``K`` stored points per sample, for likelihood-free objectives (DiffusionNFT).

    Attributes:
        current: ``[n, K, ...]`` velocity of the current parameters (with grad).
        old: ``[n, K, ...]`` velocity of the "old" parameters (an exponential moving average; constant).
        target: ``[n, K, ...]`` the flow-matching target ``eps - x_0`` (constant).
    """

    current: Tensor
    old: Tensor
    target: Tensor

    @property
    def num_samples(self) -> int:
        return self.current.shape[0]

    def select(self, index: Tensor) -> VelocityPredictions:
        return VelocityPredictions(*(getattr(self, f.name)[index] for f in fields(self)))

    def tensors(self) -> list[Tensor]:
        return [self.current, self.old, self.target]


@dataclass(frozen=True)
class ScoreOutput(Mapping[str, Any]):
    """What ``policy.score`` returns for a (micro-)batch of ``n`` samples: ``logp`` and the requested features.

    Attributes:
        logp: ``[n, T]`` float32 log-probabilities (or likelihood proxies) of the stored actions (with grad).
        features: declared score-feature name -> value (``[n, T, ...]`` tensors, or a declared value object such as
            :class:`VelocityPredictions`), each checked against its declaration. The output reads like a mapping of
            them: ``out["entropy"]``, ``out.get("kl")``, ``"hidden" in out``.
    """

    logp: Tensor
    features: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        kept = {name: value for name, value in self.features.items() if value is not None}
        samples, actions = self.logp.shape[0], (self.logp.shape[1] if self.logp.dim() > 1 else None)
        for name, value in kept.items():
            if signal(name).producer != "score":
                raise ValueError(f"ScoreOutput: {name!r} is not a score feature (its producer is rollout or step)")
            check_value(name, value, samples=samples, actions=actions, where="ScoreOutput")
        object.__setattr__(self, "features", MappingProxyType(kept))

    def __getitem__(self, name: str) -> Any:
        return self.features[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.features)

    def __len__(self) -> int:
        return len(self.features)

    def require(self, name: str, option: str) -> Any:
        """The feature ``name``, or a ``ValueError`` naming ``option``."""
        if name not in self.features:
            raise ValueError(
                f"{option} needs the score feature {name!r}, which this scoring pass did not return; list it in the "
                "option's registry meta 'needs' (the trainer then requests it) or request it yourself."
            )
        return self.features[name]

    def with_features(self, **features: Any) -> ScoreOutput:
        """A copy with ``features`` added or replaced (``None`` removes one)."""
        merged = {**self.features, **features}
        return ScoreOutput(self.logp, {name: value for name, value in merged.items() if value is not None})

    def differentiable(self) -> list[Tensor]:
        """Every tensor of the output that carries gradient (for a zero-weight backward that must touch them all)."""
        tensors = [self.logp]
        for value in self.features.values():
            tensors += value.tensors() if hasattr(value, "tensors") else [value] if isinstance(value, Tensor) else []
        return [tensor for tensor in tensors if tensor.requires_grad]
