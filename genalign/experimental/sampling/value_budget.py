"""A state-zero value estimate from a history of (prompt, success) pairs that decides, before the rollout, how the
step's sampling budget is split between prompts (V_0 [137], with a cheap online estimator; experimental tier)."""

from __future__ import annotations

import math
import zlib
from typing import Any

import torch
from torch import Tensor

from genalign.experimental.sampling.boundaries import check_range, rescaled
from genalign.sampling.base import SAMPLE_SOURCES, Candidate, Decision, Outcome, RuleDefaults, per_prompt


def prompt_features(prompt: Any, *, size: int, ngram: int) -> Tensor:
    """``[size]`` unit vector of hashed character ``ngram`` counts of a prompt (a string, or chat messages whose text
    is joined); the hash is CRC-32, the same in every process and run. An empty text gives zeros."""
    if isinstance(prompt, str):
        text = prompt
    else:
        parts = []
        for message in prompt or []:
            content = message.get("content", "") if isinstance(message, dict) else ""
            if isinstance(content, str):
                content = [{"text": content}]
            items = [part.get("text", "") for part in content if isinstance(part, dict)]
            parts += [item for item in items if isinstance(item, str)]
        text = "\n".join(parts)
    text = " ".join(text.lower().split())
    counts = torch.zeros(size, dtype=torch.float64)
    for start in range(max(len(text) - ngram + 1, 0)):
        counts[zlib.crc32(text[start : start + ngram].encode()) % size] += 1.0
    norm = counts.norm()
    return counts / norm if norm > 0 else counts


def predicted_success(
    features: Tensor, history: Tensor, successes: Tensor, *, neighbours: int, temperature: float, prior: float
) -> Tensor:
    """``[P]`` success predicted for prompts ``features`` ``[P, D]`` from the history's ``[M, D]`` prompts and their
    observed successes ``[M]``: ``p̂ = (Σ_{j∈kNN} k_j s_j + α·s̄) / (Σ_{j∈kNN} k_j + α)`` over the ``neighbours`` most
    similar history prompts, ``k_j = exp((cos_j − 1)/τ)`` (1 for the same prompt), ``s̄`` the history's mean success
    (½ when the history is empty) and ``α = prior``."""
    if history.shape[0] == 0:
        return torch.full((features.shape[0],), 0.5, dtype=torch.float64)
    similarity = features @ history.T  # [P, M] cosine (unit vectors)
    k = min(neighbours, history.shape[0])
    top, index = similarity.topk(k, dim=1)  # [P, k]
    kernel = torch.exp((top - 1.0) / temperature)  # [P, k]
    mean = successes.mean()
    return ((kernel * successes[index]).sum(1) + prior * mean) / (kernel.sum(1) + prior)  # [P]


def informative_probability(success: float, samples: int) -> float:
    """Probability that ``samples`` independent samples of a prompt with success probability ``success`` are not all
    equal (the group has a learning signal): ``1 − p^n − (1 − p)^n``."""
    return 1.0 - success**samples - (1.0 - success) ** samples


def allocate(predicted: list[float], base: int, budget: int, max_extra: int) -> list[int]:
    """Extra samples per prompt: ``budget`` samples given one at a time to the prompt whose probability of an
    informative group (:func:`informative_probability`) rises most, at most ``max_extra`` each (ties: the first
    prompt); every prompt starts with ``base``."""
    extra = [0] * len(predicted)
    for _ in range(budget):
        gains = [
            informative_probability(p, base + e + 1) - informative_probability(p, base + e) if e < max_extra else -1.0
            for p, e in zip(predicted, extra)
        ]
        best = max(range(len(gains)), key=lambda i: gains[i], default=None)
        if best is None or gains[best] <= 0.0:
            break
        extra[best] += 1
    return extra


@SAMPLE_SOURCES.register(
    "value_budget",
    formula="before the rollout: p̂_x = (Σ_{j∈kNN(x)} k_j s_j + α·s̄)/(Σ k_j + α) over a history of (prompt, success) "
    "pairs, k_j = exp((cos(φ_x, φ_j) − 1)/τ), φ = hashed character n-grams; every prompt gets n₀ samples, then "
    "(G − n₀)·P more, one at a time to argmax_x [I(p̂_x, n_x + 1) − I(p̂_x, n_x)], I(p, n) = 1 − pⁿ − (1 − p)ⁿ",
    source="[137] V_0 (state-zero value prediction for sampling-budget allocation; cheap online estimator)",
    summary="Predicts each prompt's success before sampling it from the history of similar prompts' results (no "
    "parameter updates), and spends the step's fixed sampling budget where it most raises the chance of an "
    "informative group.",
)
class ValueBudget(RuleDefaults):
    """[137] V_0 as a resource scheduler: predict each prompt's success rate before the rollout from the policy's
    recent history of instruction-performance pairs, and allocate the sampling budget with it.

    Reading chosen: V_0 is a generalist value model (an LM-sized embedder with an in-context regression head) that
    genalign does not ship; its two ideas are kept with a cheap estimator. The policy's capability is profiled by a
    history of the last ``history`` (prompt, observed success) pairs; a prompt's state-zero value is a kernel-weighted
    mean of the successes of its ``neighbours`` most similar history prompts (hashed character n-grams, cosine
    similarity, shrunk towards the history's mean), so unseen prompts get predictions and no parameter is trained
    (:func:`predicted_success`). The step keeps GRPO's budget of ``G`` samples per prompt: each prompt gets
    ``base_samples`` in the first round, and the remaining ``(G − base_samples)·P`` go, one at a time, where the
    probability that the group is informative (not all equal) rises most (:func:`allocate`): confidently solved or
    hopeless prompts get few, uncertain ones more. The predictions are made in ``choose`` (before the rollout) and
    only spent in the second round; the first round's results never change them.

    Args:
        base_samples: samples per prompt in the first round (2 .. ``group_size``).
        max_extra: the most extra samples one prompt gets.
        history: pairs kept (the most recent).
        neighbours: history prompts a prediction averages.
        similarity_temperature: ``τ > 0`` of the kernel.
        prior_strength: ``α >= 0``, the weight of the history's mean success.
        feature_size: hashed feature dimensions; ngram: character n-gram length.
        reward_range: ``[low, high]`` rewards mapped to success 0 and 1.
    """

    rounds = 2

    def __init__(
        self, *, base_samples: int = 4, max_extra: int = 12, history: int = 1024, neighbours: int = 16,
        similarity_temperature: float = 0.1, prior_strength: float = 1.0, feature_size: int = 512, ngram: int = 3,
        reward_range: tuple[float, float] = (0.0, 1.0),
    ) -> None:  # fmt: skip
        for name, value, low in (("base_samples", base_samples, 2), ("max_extra", max_extra, 0),
                                 ("history", history, 1), ("neighbours", neighbours, 1),
                                 ("feature_size", feature_size, 1), ("ngram", ngram, 1)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} = {value!r} must be an integer >= {low}")
        if not (similarity_temperature > 0 and prior_strength >= 0):
            raise ValueError(
                f"need similarity_temperature > 0 and prior_strength >= 0, got {similarity_temperature!r}, "
                f"{prior_strength!r}"
            )
        self.base, self.max_extra, self.capacity, self.neighbours = base_samples, max_extra, history, neighbours
        self.temperature, self.prior = similarity_temperature, prior_strength
        self.size, self.ngram = feature_size, ngram
        self.reward_range = check_range(reward_range)
        self.group_size = base_samples
        self.history = torch.zeros(0, feature_size, dtype=torch.float64)  # [M, D] prompt features
        self.successes = torch.zeros(0, dtype=torch.float64)  # [M] their observed success
        self._features: dict[int, Tensor] = {}  # this step: stream position -> features (never checkpointed)
        self._predicted: dict[int, float] = {}  # this step: stream position -> p̂

    def samples_per_prompt(self, group_size: int) -> int:
        if self.base > group_size:
            raise ValueError(
                f"value_budget: base_samples = {self.base} exceeds algorithm.group_size = {group_size}, the budget "
                "per prompt; lower base_samples or raise group_size."
            )
        self.group_size = group_size
        return self.base

    def predict(self, features: Tensor) -> Tensor:
        """``[P]`` the predicted success of prompts with ``features`` ``[P, D]`` (:func:`predicted_success`)."""
        return predicted_success(features, self.history, self.successes, neighbours=self.neighbours,
                                 temperature=self.temperature, prior=self.prior)  # fmt: skip

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        """Predict every candidate's success before the rollout (admits them all)."""
        if pool:
            features = torch.stack([prompt_features(c.row.get("prompt", ""), size=self.size, ngram=self.ngram)
                                    for c in pool])  # fmt: skip
            for candidate, vector, value in zip(pool, features, self.predict(features).tolist()):
                self._features[candidate.position], self._predicted[candidate.position] = vector, value
        return pool

    def more_samples(self, outcome: Outcome) -> dict[int, int]:
        positions = list(dict.fromkeys(outcome.positions.tolist()))
        predicted = [self._predicted.get(p, self._fallback()) for p in positions]
        budget = (self.group_size - self.base) * len(positions)
        extra = allocate(predicted, self.base, budget, self.max_extra)
        return {p: k for p, k in zip(positions, extra) if k > 0}

    def _fallback(self) -> float:
        """The prediction for a prompt this rule did not see before the rollout (another rule refilled it)."""
        return float(self.successes.mean()) if self.successes.numel() else 0.5

    def after_rewards(self, outcome: Outcome) -> Decision:
        prompts = per_prompt(rescaled(outcome, self.reward_range))
        errors, added = [], []
        for position, mean, valid in zip(prompts.positions, prompts.mean, prompts.valid):
            if valid == 0 or position not in self._features:
                continue
            errors.append(abs(self._predicted[position] - mean))
            added.append((self._features[position], mean))
        if added:
            self.history = torch.cat([self.history, torch.stack([f for f, _ in added])])[-self.capacity :]
            self.successes = torch.cat([self.successes, torch.tensor([s for _, s in added])])[-self.capacity :]
        counts = torch.unique(outcome.positions, return_counts=True)[1] if len(outcome) else torch.zeros(0)
        stats = {
            "prediction_error": sum(errors) / len(errors) if errors else math.nan,
            "history": float(self.history.shape[0]),
            "samples_per_prompt_max": float(counts.max()) if counts.numel() else 0.0,
        }
        self._features, self._predicted = {}, {}
        return Decision(stats=stats)

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history.clone(), "successes": self.successes.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = state["history"].to(torch.float64)
        self.successes = state["successes"].to(torch.float64)
