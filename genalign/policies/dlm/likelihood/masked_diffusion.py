"""Likelihood proxies for masked diffusion language models, registered by name in :data:`LIKELIHOOD_PROXIES`.

A masked diffusion LM has no token-by-token likelihood to put in a policy ratio; each published method plugs in a
different proxy (shared/reference/formulas.md §6). Every proxy here has one signature::

    proxy(model_fn, prompt_ids [N, P], completion_ids [N, T], completion_mask [N, T], *, mask_id, seeds [N],
          prompt_attention_mask [N, P] | None, decode_step [N, T] | None, **hp) -> ProxyOutput

and returns ``logp [N, A]`` with its ``mask [N, A]``: ``A = T`` for token-level proxies and ``A = 1`` (or 2 for SPG)
for sequence-level ones. The action axis ``A`` is what the shared backend calls ``T``.

Randomness is drawn per sample from ``torch.Generator().manual_seed(seeds[i])`` on the CPU: the estimate of a sample
depends on its seed alone, never on which other samples share its micro-batch, so a rollout scored once at sampling
time and again in the first update with the same seeds gives identical numbers (ratio exactly 1, ARCHITECTURE.md
contract 2).

Notation: ``L`` answer positions under noise (all ``T`` completion positions: the whole generated block, EOS padding
included, is what the model sampled); ``lp_j(S) = log p_θ(x_j | x with the positions in S masked)``. The ELBO of
the answer is (LLaDA; the continuous-time form ``E_t[(1/t) Σ_{j masked} lp_j]`` with ``t ~ U(0, 1)`` reduces to it)::

    ELBO(x) = Σ_{l=1}^{L} (1/l) · mean_{|S|=l} Σ_{j∈S} lp_j(S)

Token-level proxies return per-token terms whose sum over the answer is the sequence estimate; sequence-level output
(``level="sequence"``) is the sum over ``completion_mask`` divided by its length (ESPO's per-token normalisation).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from torch import Tensor

from genalign.registry import Registry

ModelFn = Callable[[Tensor, Tensor | None], Tensor]
Level = Literal["token", "sequence"]


@dataclass
class ProxyOutput:
    """What a likelihood proxy returns.

    Attributes:
        logp: ``[N, A]`` float32 log-likelihood estimate per action (with grad when the model has grad).
        mask: ``[N, A]`` float32, 1 where the action is trained.
        num_forward: model forward passes spent per sample.
    """

    logp: Tensor
    mask: Tensor
    num_forward: int


class LikelihoodProxy(Protocol):
    def __call__(
        self,
        model_fn: ModelFn,
        prompt_ids: Tensor,
        completion_ids: Tensor,
        completion_mask: Tensor,
        *,
        mask_id: int,
        seeds: Tensor,
        prompt_attention_mask: Tensor | None = None,
        decode_step: Tensor | None = None,
        **hp,
    ) -> ProxyOutput: ...


#: name -> proxy with the signature of :class:`LikelihoodProxy`.
LIKELIHOOD_PROXIES: Registry[LikelihoodProxy] = Registry(
    "likelihood proxy", catalogue="genalign.experimental.likelihood"
)


# ----------------------------------------------------------------------------------------------------------------------
# shared pieces
# ----------------------------------------------------------------------------------------------------------------------


def sample_generators(seeds: Tensor) -> list[torch.Generator]:
    """One CPU generator per sample, seeded with ``seeds[i]`` (``[N]`` long)."""
    return [torch.Generator().manual_seed(int(s)) for s in seeds.tolist()]


def masked_token_logp(
    model_fn: ModelFn,
    prompt_ids: Tensor,
    completion_ids: Tensor,
    prompt_noise: Tensor,
    completion_noise: Tensor,
    *,
    mask_id: int,
    prompt_attention_mask: Tensor | None,
) -> Tensor:
    """Log-probabilities of the true answer tokens when the given positions are replaced by the mask token.

    Args:
        prompt_ids: ``[N, P]``; completion_ids: ``[N, T]``.
        prompt_noise: ``[N, K, P]`` bool, prompt positions to mask in each of ``K`` noisy copies.
        completion_noise: ``[N, K, T]`` bool, answer positions to mask in each copy.

    Returns:
        ``[N, K, T]`` float32 ``log p(x_j | noisy copy)`` at every answer position (masked or not; callers weight),
        under the model's distribution over real tokens (the mask token excluded, as in the sampler).
    """
    n, k, t = completion_noise.shape
    device = completion_ids.device
    prompts = prompt_ids.unsqueeze(1).expand(n, k, -1)  # [N, K, P]
    answers = completion_ids.unsqueeze(1).expand(n, k, -1)  # [N, K, T]
    noisy_prompts = torch.where(prompt_noise.to(device), mask_id, prompts)
    noisy_answers = torch.where(completion_noise.to(device), mask_id, answers)
    input_ids = torch.cat([noisy_prompts, noisy_answers], dim=2).reshape(n * k, -1)  # [N·K, P + T]
    attention = None
    if prompt_attention_mask is not None:
        full = torch.cat([prompt_attention_mask, torch.ones_like(completion_ids)], dim=1)  # [N, P + T]
        attention = full.unsqueeze(1).expand(n, k, -1).reshape(n * k, -1)
    logits = model_fn(input_ids, attention)[:, -t:].float()  # [N·K, T, V]
    logits = logits.index_fill(-1, torch.tensor([mask_id], device=logits.device), -torch.inf)  # as the sampler
    logp = torch.log_softmax(logits, dim=-1).gather(-1, answers.reshape(n * k, t, 1)).squeeze(-1)  # [N·K, T]
    return logp.reshape(n, k, t)


def reduce_level(token_terms: Tensor, completion_mask: Tensor, level: Level) -> tuple[Tensor, Tensor]:
    """``token``: ``(terms [N, T], mask)``; ``sequence``: ``(Σ_t m·terms / Σ_t m  [N, 1], ones [N, 1])``."""
    if level == "token":
        return token_terms, completion_mask
    if level != "sequence":
        raise ValueError(f"level={level!r} is not valid; use 'token' or 'sequence'.")
    length = completion_mask.sum(dim=1, keepdim=True).clamp_min(1.0)  # [N, 1]
    sequence = (token_terms * completion_mask).sum(dim=1, keepdim=True) / length  # [N, 1]
    return sequence, torch.ones_like(sequence)


def _stratified_uniform(num: int, generator: torch.Generator, low: float, high: float) -> Tensor:
    """``num`` draws, one per stratum ``[k/num, (k+1)/num)`` of ``U(low, high)``. ``[num]`` float64."""
    u = (torch.arange(num, dtype=torch.float64) + torch.rand(num, generator=generator, dtype=torch.float64)) / num
    return low + (high - low) * u


def _check_range(t_min: float, t_max: float) -> None:
    if not 0.0 <= t_min < t_max <= 1.0:
        raise ValueError(f"t_min={t_min}, t_max={t_max}: need 0 <= t_min < t_max <= 1 (e.g. 0.0 and 1.0).")


def _check_samples(num_samples: int) -> None:
    if not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples={num_samples!r} must be a positive integer (Monte-Carlo draws per sequence).")


def elbo_draws(
    model_fn: ModelFn,
    prompt_ids: Tensor,
    completion_ids: Tensor,
    *,
    mask_id: int,
    seeds: Tensor,
    prompt_attention_mask: Tensor | None,
    num_samples: int,
    mask_sampling: Literal["count", "rate"],
    t_min: float = 0.0,
    t_max: float = 1.0,
) -> Tensor:
    """``K = num_samples`` independent one-pass ELBO draws per sequence, as per-token terms ``[N, K, T]``.

    Each draw is unbiased for :math:`ELBO` (module docstring) when ``(t_min, t_max) = (0, 1)``:

    * ``"count"`` (LLaDA / ESPO [183]): stratified masked count ``l_k = ceil(u_k · L)``, ``u_k`` in the ``k``-th of
      ``K`` strata of ``U(0, 1)``; a uniformly random subset of ``l_k`` positions is masked, weight ``L / l_k``.
    * ``"rate"``: stratified rate ``t_k``, each position masked independently with probability ``t_k``, weight
      ``1 / t_k``.
    """
    _check_samples(num_samples)
    _check_range(t_min, t_max)
    n, length = completion_ids.shape
    noise = torch.zeros(n, num_samples, length, dtype=torch.bool)
    weight = torch.zeros(n, num_samples, 1, dtype=torch.float64)
    for i, generator in enumerate(sample_generators(seeds)):
        levels = _stratified_uniform(num_samples, generator, t_min, t_max)  # [K]
        for k, u in enumerate(levels.tolist()):
            noise[i, k], weight[i, k] = draw_mask(u, length, generator, mask_sampling)
    return weighted_masked_terms(
        model_fn, prompt_ids, completion_ids, noise, weight,
        mask_id=mask_id, prompt_attention_mask=prompt_attention_mask,
    )  # fmt: skip  # [N, K, T]


def draw_mask(
    level: float, length: int, generator: torch.Generator, mask_sampling: Literal["count", "rate"]
) -> tuple[Tensor, float]:
    """One random answer mask at noise level ``level`` in ``(0, 1]`` and its ELBO weight: ``(noise [T] bool, w)``.

    ``"count"``: ``l = ceil(level · L)`` positions (at least 1), a uniformly random subset, ``w = L / l``.
    ``"rate"``: each position masked independently with probability ``level``, ``w = 1 / level`` (the ``1/t`` of
    the continuous-time ELBO). Shared by every Monte-Carlo ELBO estimator (:func:`elbo_draws`, GDPO's quadrature).
    """
    if mask_sampling == "count":
        count = min(length, max(1, math.ceil(level * length)))
        noise = torch.zeros(length, dtype=torch.bool)
        noise[torch.randperm(length, generator=generator)[:count]] = True
        return noise, length / count
    if mask_sampling == "rate":
        rate = max(level, 1e-6)
        return torch.rand(length, generator=generator, dtype=torch.float64) < rate, 1.0 / rate
    raise ValueError(f"mask_sampling={mask_sampling!r} is not valid; use 'count' or 'rate'.")


def weighted_masked_terms(
    model_fn: ModelFn,
    prompt_ids: Tensor,
    completion_ids: Tensor,
    noise: Tensor,
    weight: Tensor,
    *,
    mask_id: int,
    prompt_attention_mask: Tensor | None,
) -> Tensor:
    """Per-token ELBO terms ``w_k · 1[j ∈ S_k] · lp_j(S_k)`` of ``K`` noisy copies (prompt left clean), one forward.

    Args:
        noise: ``[N, K, T]`` bool answer masks ``S_k``; weight: ``[N, K, 1]`` their weights.

    Returns:
        ``[N, K, T]`` float32 terms; their sum over ``T`` is the draw's ELBO estimate.
    """
    n, k, _ = noise.shape
    prompt_noise = torch.zeros(n, k, prompt_ids.shape[1], dtype=torch.bool)
    logp = masked_token_logp(
        model_fn,
        prompt_ids,
        completion_ids,
        prompt_noise,
        noise,
        mask_id=mask_id,
        prompt_attention_mask=prompt_attention_mask,
    )  # [N, K, T]
    device = logp.device
    return logp * noise.to(device) * weight.to(device, torch.float32)  # [N, K, T]


# ----------------------------------------------------------------------------------------------------------------------
# proxies
# ----------------------------------------------------------------------------------------------------------------------


@LIKELIHOOD_PROXIES.register(
    "one_step",
    source="d1 / diffu-GRPO",
    formula="log p(x_j | prompt ~15% masked, answer masked)",
    summary="One forward pass per sample: the fully masked answer's token log-probs under a randomly masked prompt.",
)
def one_step(
    model_fn: ModelFn,
    prompt_ids: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    mask_id: int,
    seeds: Tensor,
    prompt_attention_mask: Tensor | None = None,
    decode_step: Tensor | None = None,
    prompt_mask_prob: float = 0.15,
    level: Level = "token",
) -> ProxyOutput:
    """d1 / diffu-GRPO one-step mean-field proxy: mask ALL answer tokens and each real prompt token with probability
    ``prompt_mask_prob``; one forward; per-token ``log p(x_j | ·)`` at the answer positions. A fresh seed per inner
    iteration gives a fresh prompt mask (the policy re-draws ``seeds``). ``logp``: ``[N, T]`` (``level="token"``).
    """
    del decode_step
    if not 0.0 <= prompt_mask_prob < 1.0:
        raise ValueError(f"prompt_mask_prob={prompt_mask_prob} must be in [0, 1) (d1 uses 0.15).")
    n, p = prompt_ids.shape
    prompt_noise = torch.zeros(n, 1, p, dtype=torch.bool)
    for i, generator in enumerate(sample_generators(seeds)):
        prompt_noise[i, 0] = torch.rand(p, generator=generator, dtype=torch.float64) < prompt_mask_prob
    if prompt_attention_mask is not None:
        prompt_noise &= prompt_attention_mask.bool().cpu().unsqueeze(1)  # never mask padding
    completion_noise = torch.ones(n, 1, completion_ids.shape[1], dtype=torch.bool)
    logp = masked_token_logp(
        model_fn,
        prompt_ids,
        completion_ids,
        prompt_noise,
        completion_noise,
        mask_id=mask_id,
        prompt_attention_mask=prompt_attention_mask,
    )[:, 0]  # [N, T]
    out, mask = reduce_level(logp, completion_mask, level)
    return ProxyOutput(logp=out, mask=mask, num_forward=1)


@LIKELIHOOD_PROXIES.register(
    "mc_elbo",
    source="LLaDA ELBO; ESPO [183] stratified counts",
    formula="mean_k ELBO draw",
    summary="Monte-Carlo ELBO over masking rates (stratified counts), a sequence-level likelihood bound.",
)
def mc_elbo(
    model_fn: ModelFn,
    prompt_ids: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    mask_id: int,
    seeds: Tensor,
    prompt_attention_mask: Tensor | None = None,
    decode_step: Tensor | None = None,
    num_samples: int = 2,
    mask_sampling: Literal["count", "rate"] = "count",
    t_min: float = 0.0,
    t_max: float = 1.0,
    level: Level = "sequence",
) -> ProxyOutput:
    """Monte-Carlo ELBO with ``1/t`` weights and stratified mask counts, averaged over ``num_samples`` independent
    draws (see :func:`elbo_draws`). ``logp``: ``[N, 1]`` ELBO / length (``level="sequence"``, ESPO [183]) or
    ``[N, T]`` per-token ELBO terms (``level="token"``).
    """
    del decode_step
    draws = elbo_draws(
        model_fn,
        prompt_ids,
        completion_ids,
        mask_id=mask_id,
        seeds=seeds,
        prompt_attention_mask=prompt_attention_mask,
        num_samples=num_samples,
        mask_sampling=mask_sampling,
        t_min=t_min,
        t_max=t_max,
    )  # [N, K, T]
    out, mask = reduce_level(draws.mean(dim=1), completion_mask, level)
    return ProxyOutput(logp=out, mask=mask, num_forward=num_samples)


@LIKELIHOOD_PROXIES.register(
    "coupled",
    source="coupled-GRPO [37], ESPO [183]",
    formula="w(|S|)·A_S + w(|Sᶜ|)·A_Sᶜ",
    summary="Complementary mask pairs: every answer token is scored exactly once per pair (lower variance).",
)
def coupled(
    model_fn: ModelFn,
    prompt_ids: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    mask_id: int,
    seeds: Tensor,
    prompt_attention_mask: Tensor | None = None,
    decode_step: Tensor | None = None,
    num_samples: int = 1,
    mask_sampling: Literal["count", "rate"] = "count",
    t_min: float = 0.0,
    t_max: float = 1.0,
    level: Level = "sequence",
) -> ProxyOutput:
    """Coupled complementary masks (DiffuCoder coupled-GRPO [37]; ESPO's complementary pass [183]).

    Each of ``num_samples`` pairs masks a set ``S`` in pass A and exactly its complement ``Sᶜ`` in pass B, so every
    answer token is scored exactly once per pair; the estimate is averaged over pairs. ``2 · num_samples`` forward
    passes.

    * ``"count"`` (default): ``|S| = l`` with ``l`` uniform on ``{0, …, L}`` (stratified across pairs), ``S`` a
      uniformly random subset; pass terms weighted ``(L+1) / (2l)`` and ``(L+1) / (2(L−l))``. Size ``k`` subsets then
      get total weight ``1 / (k·C(L, k))`` from the two passes together: unbiased for the ELBO, with bounded weights.
    * ``"rate"``: ``t ~ U(t_min, t_max)``; A masks each position with probability ``t`` (weight ``1/t``), B the
      complement (weight ``1/(1−t)``); estimate ``½(A + B)``. Unbiased for ``(0, 1)`` but the ``1/t`` weights are
      heavy-tailed; DiffuCoder's ``(0.2, 0.8)`` bounds them at the price of a bias.

    ``logp``: ``[N, 1]`` (``level="sequence"``) or ``[N, T]``.
    """
    del decode_step
    _check_samples(num_samples)
    _check_range(t_min, t_max)
    n, length = completion_ids.shape
    noise = torch.zeros(n, 2 * num_samples, length, dtype=torch.bool)
    weight = torch.zeros(n, 2 * num_samples, 1, dtype=torch.float64)
    for i, generator in enumerate(sample_generators(seeds)):
        if mask_sampling == "count":
            levels = _stratified_uniform(num_samples, generator, 0.0, 1.0)  # [K]
        elif mask_sampling == "rate":
            levels = _stratified_uniform(num_samples, generator, t_min, t_max).clamp(1e-6, 1 - 1e-6)  # [K]
        else:
            raise ValueError(f"mask_sampling={mask_sampling!r} is not valid; use 'count' or 'rate'.")
        for k, u in enumerate(levels.tolist()):
            if mask_sampling == "count":
                count = min(length, int(u * (length + 1)))  # uniform on {0, ..., L}
                pass_a = torch.zeros(length, dtype=torch.bool)
                pass_a[torch.randperm(length, generator=generator)[:count]] = True
                weight_a = (length + 1) / (2 * count) if count > 0 else 0.0
                weight_b = (length + 1) / (2 * (length - count)) if count < length else 0.0
            else:
                pass_a = torch.rand(length, generator=generator, dtype=torch.float64) < u
                weight_a, weight_b = 0.5 / u, 0.5 / (1.0 - u)
            noise[i, 2 * k], noise[i, 2 * k + 1] = pass_a, ~pass_a
            weight[i, 2 * k], weight[i, 2 * k + 1] = weight_a, weight_b
    terms = weighted_masked_terms(
        model_fn, prompt_ids, completion_ids, noise, weight,
        mask_id=mask_id, prompt_attention_mask=prompt_attention_mask,
    )  # fmt: skip  # [N, 2K, T]
    pairs = terms.sum(dim=1)  # [N, T] summed over passes
    out, mask = reduce_level(pairs / num_samples, completion_mask, level)
    return ProxyOutput(logp=out, mask=mask, num_forward=2 * num_samples)


@LIKELIHOOD_PROXIES.register(
    "spg",
    source="SPG (Sandwiched Policy Gradient)",
    formula="[ELBO, ω·EUBO_β + (1−ω)·ELBO]",
    summary="Lower bound for positive advantages, a mixed upper bound for negative ones.",
)
def spg(
    model_fn: ModelFn,
    prompt_ids: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    mask_id: int,
    seeds: Tensor,
    prompt_attention_mask: Tensor | None = None,
    decode_step: Tensor | None = None,
    num_samples: int = 2,
    beta: float = 1.0,
    mixture: float = 0.5,
    mask_sampling: Literal["count", "rate"] = "count",
) -> ProxyOutput:
    """Sandwiched bounds for SPG: a lower bound for positive-advantage samples, an upper one for negative ones.

    Returns ``logp [N, 2]``, both per answer token (divided by the length of ``completion_mask``):

    * column 0: the Monte-Carlo ELBO (mean of ``K = num_samples`` draws ``Y_k``, as :func:`mc_elbo`);
    * column 1: ``ω · U_β + (1 − ω) · ELBO`` with ``ω = mixture`` and the Rényi-type upper estimate
      ``U_β = (1/β) · log mean_k exp(β · Y_k)``, which is ``>= ELBO`` by Jensen and tends to it as ``β -> 0``.

    The SPG objective (:func:`genalign.algorithms.objectives.likelihood.spg_loss`) uses column 0 where ``A >= 0`` and
    column 1 where ``A < 0``. Note: ``U_β`` is this library's Monte-Carlo form of SPG's evidence upper bound; it is
    an upper estimate of the ELBO draws, not a certified bound on ``log p``. ``mixture=0`` gives plain ELBO on both
    sides.
    """
    del decode_step
    if beta <= 0:
        raise ValueError(f"beta={beta} must be > 0 (SPG's upper-bound sharpness, e.g. 1.0).")
    if not 0.0 <= mixture <= 1.0:
        raise ValueError(f"mixture={mixture} must be in [0, 1] (weight of the upper bound; 0.5 mixes evenly).")
    draws = elbo_draws(
        model_fn,
        prompt_ids,
        completion_ids,
        mask_id=mask_id,
        seeds=seeds,
        prompt_attention_mask=prompt_attention_mask,
        num_samples=num_samples,
        mask_sampling=mask_sampling,
    )  # [N, K, T]
    length = completion_mask.sum(dim=1).clamp_min(1.0)  # [N]
    per_draw = (draws * completion_mask.unsqueeze(1)).sum(dim=2) / length.unsqueeze(1)  # [N, K]
    elbo = per_draw.mean(dim=1)  # [N]
    upper = (torch.logsumexp(beta * per_draw, dim=1) - math.log(num_samples)) / beta  # [N]
    logp = torch.stack([elbo, mixture * upper + (1 - mixture) * elbo], dim=1)  # [N, 2]
    return ProxyOutput(logp=logp, mask=torch.ones_like(logp), num_forward=num_samples)
