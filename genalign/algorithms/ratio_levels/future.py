"""The future-influence ratio level: FIPO's discounted future-KL weights [316] on token-level ratios.

FIPO reweights each token's advantage by how much the policy is moving on the rest of its response: the discounted
sum of the per-token log-ratios from ``t`` on (a signed "future KL" between the current and the old policy) measures
whether the continuation the token led to is being reinforced or suppressed. The weight needs the current log-probs,
so it lives in the objective (a ratio level) rather than in a credit rule computed before the update; it differs from
the credit rule ``future_kl`` (FRPO [75]), which subtracts the future KL *to the reference* from the advantage.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.ratio_levels.base import RATIO_LEVELS, ClipFn, LevelOutput


def discounted_future_sum(values: Tensor, gamma: float, *, chunk_size: int = 128) -> Tensor:
    """``[N, T]`` ``F_t = Σ_{k >= t} γ^(k − t)·x_k`` of ``values`` ``[N, T]``, by chunked products with the decay matrix
    (no ``γ^(−t)`` factor, so long sequences cannot overflow)."""
    steps = values.shape[1]
    positions = torch.arange(steps, device=values.device)[:, None]  # [T, 1]
    out = torch.zeros_like(values)
    for start in range(0, steps, chunk_size):
        columns = torch.arange(start, min(steps, start + chunk_size), device=values.device)[None, :]  # [1, C]
        distance = columns - positions  # [T, C]
        decay = torch.where(distance >= 0, gamma ** distance.clamp_min(0).to(values.dtype), 0.0)  # [T, C]
        out = out + values[:, start : start + chunk_size] @ decay.t()  # [N, C] @ [C, T]
    return out


def influence_weights(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    decay_rate: float,
    influence_clip: float | None,
    clip_high_only: bool,
    safety_threshold: float | None,
    filter_ratio: float | None,
) -> Tensor:
    """``[N, T]`` detached FIPO influence weights ``f_t = clip(exp(Σ_{k>=t} γ^(k−t) m_k ℓ_k))``, ``γ = 2^(−1/decay)``;
    tokens whose ratio exceeds ``filter_ratio`` do not contribute to the sum; negative-advantage tokens whose ratio
    exceeds ``safety_threshold`` get ``f`` clamped to ``[0.8, 1]``."""
    delta = torch.where(mask > 0, log_ratio.detach(), 0.0)  # [N, T]
    if filter_ratio is not None:
        delta = torch.where(delta > math.log(filter_ratio), 0.0, delta)
    future = torch.where(mask > 0, discounted_future_sum(delta, 2.0 ** (-1.0 / decay_rate)), 0.0)  # [N, T]
    weights = future.exp()
    if influence_clip is not None:
        weights = weights.clamp(1.0 if clip_high_only else 1.0 - influence_clip, 1.0 + influence_clip)
    if safety_threshold is not None:
        risky = (advantages < 0) & (log_ratio.detach() > math.log(safety_threshold))  # [N, T]
        weights = torch.where(risky, weights.clamp(0.8, 1.0), weights)
    return weights


@RATIO_LEVELS.register(
    "future_influence",
    formula="f_it = clip(exp(Σ_{k≥t} γ^(k−t)·m_k·ℓ_k), [1, 1+ε_f]), γ = 2^(−1/decay_rate) (ℓ_k > log δ left out; "
    "A<0 ∧ ρ>4: f ∈ [0.8, 1]); surrogate = (A·sg f)·exp(clip form(ℓ_t, A·f)) per token",
    source="[316] FIPO (ms-swift / verl FIPO implementations); differs: no filter of sequences with several "
    "dual-clipped tokens (verl recipe)",
    summary="Token ratios with advantages reweighted by the discounted future KL between the current and the old "
    "policy: tokens whose continuation is being reinforced get more credit.",
)
def future_influence_level(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_fn: ClipFn,
    batch: StepBatch,
    *,
    decay_rate: float = 32.0,
    influence_clip: float | None = 0.2,
    clip_high_only: bool = True,
    safety_threshold: float | None = 4.0,
    filter_ratio: float | None = 10.0,
) -> LevelOutput:
    """FIPO [316]: per-token ratios, clipped by the chosen clip form, on advantages ``A·f_t`` where the influence
    weight ``f_t`` is the clipped exponential of the discounted future sum of the token log-ratios ``ℓ = logπθ −
    logπold`` (detached).

    At the first inner step every ``ℓ`` is 0 and ``f = 1``: FIPO is GRPO there and acts from the second optimizer step
    of a rollout batch on (``minibatches`` or ``inner_epochs`` > 1), as in the published setting. Defaults follow the
    published implementations: half-life ``decay_rate = 32`` tokens, ``f ∈ [1, 1.2]`` (``clip_high_only``), the
    negative-advantage safety cap at ratio 4 and the exclusion from the sum of tokens whose ratio exceeds the dual-clip
    bound (10 in the official 32B recipe); pair it with ``clip: dual_clip`` (``dual_clip_c: 10``) and clip-higher
    (0.2 / 0.28) for that recipe. Not included: the verl recipe's extra filter that drops sequences with more than one
    dual-clipped token.

    Args:
        log_ratio: ``[N, T]`` ``ℓ`` (0 on padding).
        advantages: ``[N, T]`` per-action advantages.
        mask: ``[N, T]`` 1 where an action is trained.
        clip_fn: the clip form (applied per token, on the reweighted advantages).
        batch: unused.
        decay_rate: half-life in tokens, ``> 0``; ``γ = 2^(−1/decay_rate)``.
        influence_clip: ``ε_f``; ``None`` leaves ``f`` unclipped.
        clip_high_only: clip ``f`` to ``[1, 1 + ε_f]`` (else ``[1 − ε_f, 1 + ε_f]``).
        safety_threshold: ratio above which a negative-advantage token's ``f`` is capped to ``[0.8, 1]``; ``None``:
            off.
        filter_ratio: tokens with ratio above it do not enter the future sum; ``None``: off.
    Returns:
        :class:`LevelOutput` with the per-token ratio.
    """
    if not decay_rate > 0:
        raise ValueError(f"decay_rate must be > 0 (a half-life in tokens), got {decay_rate!r}")
    if influence_clip is not None and not 0 <= influence_clip < 1:
        raise ValueError(f"influence_clip must be in [0, 1) or None, got {influence_clip!r}")
    for name, value in (("safety_threshold", safety_threshold), ("filter_ratio", filter_ratio)):
        if value is not None and not value > 0:
            raise ValueError(f"{name} must be > 0 or None, got {value!r}")
    weights = influence_weights(
        log_ratio, advantages, mask, decay_rate=decay_rate, influence_clip=influence_clip,
        clip_high_only=clip_high_only, safety_threshold=safety_threshold, filter_ratio=filter_ratio,
    )  # fmt: skip
    weighted = advantages * weights  # [N, T]
    clipped = clip_fn(log_ratio, weighted)
    return LevelOutput(
        surrogate=weighted * clipped.log_weight.exp(),  # [N, T]
        ratio=log_ratio.detach().exp(),
        clipped_low=clipped.clipped_low,
        clipped_high=clipped.clipped_high,
    )
