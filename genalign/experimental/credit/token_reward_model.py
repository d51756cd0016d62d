"""OREAL's token-level reward model [147]: a token scorer trained on outcome labels alone, whose per-token scores
weight the tokens of each trajectory (rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`; experimental)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.credit.shaping import success_mask
from genalign.experimental.credit.running_means import global_mean


def token_features(hidden: Tensor) -> Tensor:
    """``[N, T, H]`` float64 features of the detached hidden states: each vector standardised over its ``H`` entries
    (zero mean, unit variance), so that one learning rate fits any model's scale."""
    h = hidden.detach().double()
    return (h - h.mean(-1, keepdim=True)) / h.std(-1, keepdim=True, unbiased=False).clamp_min(1e-6)


def token_scores(features: Tensor, weight: Tensor, bias: float) -> Tensor:
    """``[N, T]`` the token-level reward ``s_it = w·h_it + b``."""
    return features @ weight + bias


def importance_weights(scores: Tensor, valid: Tensor, correct: Tensor, strength: float) -> Tensor:
    """``[N, T]`` ``ω_it = 1 − λ + λ·u_it / mean_t u_it`` with ``u = σ(s)`` on a correct sample (the tokens the model
    credits with the success) and ``u = 1 − σ(s)`` on the others (the tokens it blames for the failure); the mean is
    over the sample's valid tokens, so a sample's total weight is unchanged; 0 on padding."""
    p = torch.sigmoid(scores)  # [N, T]
    u = torch.where(correct[:, None], p, 1.0 - p) * valid  # [N, T]
    mean = u.sum(1, keepdim=True) / valid.sum(1, keepdim=True).clamp_min(1.0)  # [N, 1]
    return torch.where(valid > 0, 1.0 - strength + strength * u / mean.clamp_min(1e-12), 0.0)


class TokenRewardHead:
    """The token-level reward model of :func:`token_reward_head`, bound once: a linear head ``(w [H], b)`` on the
    policy's hidden states, kept across steps and checkpoints (the state protocol) and trained after each step's
    weights by ``steps`` gradient steps on that step's outcome labels, the gradient averaged over every process
    (:func:`~genalign.experimental.credit.running_means.global_mean`), so all processes keep the same head."""

    def __init__(self, **hp: Any) -> None:
        self.hp = hp
        self.options = {**CREDIT_RULES.hyperparameters("token_reward_head"), **hp}
        _check(**self.options)
        self.weight: Tensor | None = None  # [H] float64, created at the first step (zeros: uniform weights)
        self.bias = 0.0
        self.updates = 0

    def __call__(self, advantages: Tensor, batch: StepBatch) -> Tensor:
        o = self.options
        features = token_features(batch.require("hidden", "credit rule 'token_reward_head'")).cpu()  # [N, T, H]
        if self.weight is None:
            self.weight = torch.zeros(features.shape[-1], dtype=torch.float64)
        hp = {k: v for k, v in self.hp.items() if k not in ("head_weight", "head_bias")}
        result = token_reward_head(advantages, batch, **hp, head_weight=self.weight.tolist(), head_bias=self.bias)
        valid = (batch.mask.cpu() > 0).double()  # [N, T]
        correct, present = success_mask(batch, o["success_column"], o["success_threshold"], "token_reward_head")
        self.fit(features, valid, correct.cpu().double(), present.cpu() & (valid.sum(1) > 0))  # AFTER the weights
        return result

    def fit(self, features: Tensor, valid: Tensor, labels: Tensor, used: Tensor) -> None:
        """``steps`` gradient steps of the logistic loss of ``σ(mean_t s_it)`` against ``labels`` ``[N]`` over the
        samples ``used`` ``[N]`` (``features`` ``[N, T, H]``, ``valid`` ``[N, T]``)."""
        means = (features * valid[..., None]).sum(1) / valid.sum(1, keepdim=True).clamp_min(1.0)  # [N, H]
        means, labels = means[used], labels[used]
        rows = torch.cat([means, torch.ones(means.shape[0], 1, dtype=torch.float64)], dim=1)  # [n, H + 1]
        for _ in range(self.options["steps"]):
            error = torch.sigmoid(means @ self.weight + self.bias) - labels  # [n] d loss / d z
            gradient = global_mean(error[:, None] * rows)  # [H + 1] over every process's samples
            self.weight = self.weight - self.options["lr"] * gradient[:-1]
            self.bias = self.bias - self.options["lr"] * float(gradient[-1])
        self.updates += 1

    def state_dict(self) -> dict[str, Any]:
        weight = None if self.weight is None else self.weight.tolist()
        return {"weight": weight, "bias": self.bias, "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        weight = state["weight"]
        self.weight = None if weight is None else torch.tensor(weight, dtype=torch.float64)
        self.bias, self.updates = float(state["bias"]), int(state["updates"])


def _check(*, strength: float, lr: float, steps: int, **_: Any) -> None:
    if not 0 <= strength <= 1:
        raise ValueError(f"strength={strength!r} must be in [0, 1] (0: uniform token weights)")
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr={lr!r} must be a finite number > 0 (the token reward head's step size)")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} must be an integer >= 1 (gradient steps of the head per training step)")


@CREDIT_RULES.register(
    "token_reward_head",
    bind=TokenRewardHead,
    needs=("hidden", "rewards"),
    formula="s_it = w·ĥ_it + b (ĥ: standardised hidden state); u = σ(s) on correct samples, 1 − σ(s) otherwise; "
    "A_it ← A_it·(1 − λ + λ·u_it/mean_t u_it); then (w, b) ← (w, b) − η·∇ BCE(σ(mean_t s_it), correct_i)",
    source="[147] OREAL (token-level reward model; trained online on the outcome labels)",
    summary="A token-level reward model trained on outcome labels alone (a linear head on the policy's hidden states) "
    "weights the tokens of correct samples by the success it credits them with and those of failed samples by the "
    "failure it blames on them.",
)
def token_reward_head(
    advantages: Tensor,
    batch: StepBatch,
    *,
    strength: float = 0.5,
    lr: float = 0.5,
    steps: int = 4,
    success_column: int = 0,
    success_threshold: float = 0.0,
    head_weight: Sequence[float] | None = None,
    head_bias: float = 0.0,
) -> Tensor:
    """OREAL [147]: sparse outcome rewards are made denser by a token-level reward model, trained from the binary
    outcome alone, that picks out the important tokens of each trajectory.

    The token reward ``s_it = w·ĥ_it + b`` is a linear head on the policy's standardised last hidden state predicting
    token ``t`` (detached); the trajectory's success probability is ``σ(mean_t s_it)``, so the head learns which tokens
    move a trajectory towards success from the outcome labels alone. Each sample's advantages are re-weighted over its
    tokens: a correct sample's by ``σ(s_it)`` (the tokens credited with the success), a failed one's by ``1 − σ(s_it)``
    (the tokens blamed for the failure), normalised to mean 1 over the sample's tokens and blended with uniform
    weights by ``λ = strength``. The bound option (:class:`TokenRewardHead`, what the trainer runs) keeps the head
    across steps and checkpoints and, after each step's weights, takes ``steps`` gradient steps of size ``lr`` on the
    logistic loss of that step's outcomes (its first step has ``w = 0``: uniform weights).

    Reading chosen: the abstract says a token-level reward model samples the important tokens but gives neither the
    model nor its use. genalign's model is a linear head on the policy's own hidden states trained online (OREAL trains
    a separate token-level reward model from the policy's weights); the tokens are weighted softly rather than sampled,
    and the mean-score link, the normalisation and the defaults are genalign's. Pair with ``outcome_reshaped`` (after
    it) for OREAL's full recipe.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``hidden`` ``[N, T, H]``, ``rewards`` ``[N, K]`` and ``mask``.
        strength: ``λ`` in ``[0, 1]``.
        lr, steps: the head's step size and gradient steps per training step (read by :class:`TokenRewardHead`).
        success_column: the reward column that says whether a sample is correct; success_threshold: correct above it.
        head_weight, head_bias: the head ``w`` ``[H]`` and ``b`` (supplied by the bound option); None: ``w = 0``.
    Returns:
        ``[N, T]`` the re-weighted advantages (unchanged by a head with ``w = 0``).
    """
    _check(strength=strength, lr=lr, steps=steps)
    features = token_features(batch.require("hidden", "credit rule 'token_reward_head'")).cpu()  # [N, T, H]
    size = features.shape[-1]
    if head_weight is not None and len(head_weight) != size:
        raise ValueError(f"head_weight has {len(head_weight)} entries; the hidden states have {size}")
    weight = torch.zeros(size, dtype=torch.float64) if head_weight is None else torch.tensor(head_weight).double()
    valid = (batch.mask.cpu() > 0).double()  # [N, T]
    correct, _ = success_mask(batch, success_column, success_threshold, "token_reward_head")
    weights = importance_weights(token_scores(features, weight, head_bias), valid, correct.cpu(), strength)
    return advantages * weights.to(advantages)
