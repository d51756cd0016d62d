"""Per-action regularisers of the method catalogue, and the future-KL advantage shaping.

A regulariser returns a per-action loss ``[N, T]`` that the trainer adds to the policy loss before aggregation,
exactly like the KL penalty and the entropy bonus (formulas.md §4)::

    inputs = RegularizerInputs(logp=out.logp, mask=mask, old_logp=old, advantages=adv, entropy=out.entropy, ...)
    per_action = per_action + coef * REGULARIZERS.get(name)(inputs, **args)        # [m, T]

Fixed signature ``fn(inputs: RegularizerInputs, **hp) -> [N, T]`` (0 on padding); each option names the fields it
needs (registry meta ``needs``) and raises a ``ValueError`` naming a missing one.

Options over the whole vocabulary (``needs=("vocab",)``) never see ``[N, T, V]`` logits: their math is a per-token
function of one chunk of scaled logits, ``term(logits [n, V], **hp) -> [n]`` (registry meta ``vocab_term``). The
trainer binds it with :func:`bind_vocab_term` and hands it to the policy, which evaluates it inside its chunked
log-prob pass (:func:`genalign.policies.lm.logprobs.completion_scores`) and returns ``ScoreOutput.vocab_term``
``[N, T]``; the option then reads that value from ``RegularizerInputs.vocab``::

    term = bind_vocab_term(name, **hp)                                   # logits [n, V] -> [n]
    out = policy.score(batch, vocab_term=term)                           # out.vocab_term [m, T] (grad)
    inputs = RegularizerInputs(logp=out.logp, mask=mask, vocab=out.vocab_term)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from genalign.algorithms._validation import check_float_tensor, check_mask, expand_advantages
from genalign.algorithms.regularizers import kl_k3
from genalign.registry import Registry


@dataclass(frozen=True)
class RegularizerInputs:
    """What a regulariser may read. ``[N, T]`` unless stated; tensors marked (grad) carry the gradient.

    Attributes:
        logp: log-probs of the sampled actions under the current policy (grad).
        mask: 1 where an action is trained.
        old_logp: log-probs under the policy that sampled / the previous step (constant).
        advantages: ``[N]`` (or ``[N, T]``) advantages (constant).
        entropy: per-action entropy (grad or constant).
        kl: per-action KL estimate to the reference policy (grad), as returned by ``policy.score(kl_estimator=...)``.
        vocab: per-action value of the option's vocabulary term (grad), computed by the policy inside its chunked
            log-prob pass, as returned by ``policy.score(vocab_term=bind_vocab_term(name, **hp)).vocab_term``.
        group_success: ``[N]`` mean reward of each sample's group (0/1 rewards: the success rate ``p``).
    """

    logp: Tensor
    mask: Tensor
    old_logp: Tensor | None = None
    advantages: Tensor | None = None
    entropy: Tensor | None = None
    kl: Tensor | None = None
    vocab: Tensor | None = None
    group_success: Tensor | None = None


Regularizer = Callable[..., Tensor]

#: name -> ``fn(inputs: RegularizerInputs, **hp) -> per-action loss [N, T]``
REGULARIZERS: Registry[Regularizer] = Registry("regularizer")


def _need(inputs: RegularizerInputs, name: str, option: str) -> Tensor:
    value = getattr(inputs, name)
    if value is None:
        raise ValueError(f"regularizer {option!r} needs RegularizerInputs.{name}, which is None")
    return value


def _mask(inputs: RegularizerInputs) -> Tensor:
    logp = check_float_tensor(inputs.logp, "inputs.logp", "[N, T]")
    if logp.ndim != 2:
        raise ValueError(f"inputs.logp must have shape [N, T], got {list(logp.shape)}")
    return check_mask(inputs.mask, tuple(logp.shape), logp.dtype)


@REGULARIZERS.register(
    "likelihood_preserving",
    formula="L_it = max(0, logπold − logπθ)_it · 1[Σ_t m·(logπθ − logπold) < 0] · 1[A_i > 0]",
    source="[301] LLDS",
    summary="Penalise the actions whose likelihood fell, only in trajectories whose likelihood fell.",
)
def likelihood_preserving(inputs: RegularizerInputs, *, only_positive: bool = True) -> Tensor:
    """Likelihood-preserving regularisation against Lazy Likelihood Displacement [301]: active only for a trajectory
    whose log-likelihood decreased during the update (``Σ_t ℓ_t < 0``), and inside it only on the actions responsible
    (``ℓ_t < 0``), with penalty ``−ℓ_t``.

    Reading chosen: restricted to positive-advantage trajectories by default (the displacement harms responses the
    update means to reinforce); ``only_positive=False`` applies it to all.

    Args:
        inputs: needs ``logp``, ``mask``, ``old_logp`` and (``only_positive``) ``advantages``.
        only_positive: apply only where ``A_i > 0``.
    Returns:
        ``[N, T]`` non-negative penalty (grad through ``logp``).
    """
    mask = _mask(inputs)
    log_ratio = torch.where(mask > 0, inputs.logp - _need(inputs, "old_logp", "likelihood_preserving").detach(), 0.0)
    fell = ((log_ratio * mask).sum(1) < 0)[:, None]  # [N, 1]
    if only_positive:
        advantages = expand_advantages(_need(inputs, "advantages", "likelihood_preserving"), tuple(mask.shape))
        fell = fell & (advantages.detach() > 0)
    return torch.where(fell & (mask > 0), (-log_ratio).clamp_min(0.0), 0.0)  # [N, T]


@REGULARIZERS.register(
    "entropy_split_kl",
    needs=("kl", "entropy"),
    formula="L_it = s_t · KL_it, s_t = high_entropy_scale if H_t ≥ τ else low_entropy_scale",
    source="[197] Archer",
    summary="Weaker KL on high-entropy (reasoning) actions, stronger on low-entropy (knowledge) actions.",
)
def entropy_split_kl(
    inputs: RegularizerInputs,
    *,
    entropy_threshold: float = 0.5,
    high_entropy_scale: float = 0.5,
    low_entropy_scale: float = 1.5,
) -> Tensor:
    """Archer's dual-token constraint [197], KL half: the per-action KL to the reference is scaled down on
    high-entropy actions and up on low-entropy ones (pair with ``clip: entropy_split`` for the clip half); use it in
    place of the plain KL term (``kl_coef`` multiplies it).

    Args:
        inputs: needs ``kl`` (grad), ``entropy`` and ``mask``.
        entropy_threshold: ``τ >= 0`` (nats), as in the ``entropy_split`` clip form.
        high_entropy_scale, low_entropy_scale: ``>= 0``.
    """
    if not (entropy_threshold >= 0 and high_entropy_scale >= 0 and low_entropy_scale >= 0):
        raise ValueError("entropy_threshold, high_entropy_scale and low_entropy_scale must be >= 0")
    mask = _mask(inputs)
    kl = _need(inputs, "kl", "entropy_split_kl")
    entropy = _need(inputs, "entropy", "entropy_split_kl").detach()
    scale = torch.where(entropy >= entropy_threshold, high_entropy_scale, low_entropy_scale).to(kl.dtype)  # [N, T]
    return torch.where(mask > 0, scale * kl, 0.0)


@REGULARIZERS.register(
    "mastery_hinge_kl",
    needs=("group_success",),
    formula="L_it = max(0, k3(logπold − logπθ)_it − δ) on samples of mastered groups (p ≥ p_mastered), else 0",
    source="[201] MCPO",
    summary="Hinge KL to the previous policy, only on prompts the policy has mastered.",
)
def mastery_hinge_kl(inputs: RegularizerInputs, *, margin: float = 0.01, mastered_at: float = 1.0) -> Tensor:
    """MCPO's mastery consolidation [201]: a mastered prompt (every response correct, advantage 0) gives GRPO no
    gradient, so nothing stops the policy from drifting away from it; a hinge on the per-action KL between the
    previous (``old_logp``) and the current policy bounds that drift beyond ``margin``.

    Args:
        inputs: needs ``logp``, ``old_logp``, ``group_success`` ``[N]`` and ``mask``.
        margin: ``δ >= 0``, KL allowed for free.
        mastered_at: a group counts as mastered when its success rate is ``>= mastered_at``.
    """
    if not margin >= 0:
        raise ValueError(f"margin must be >= 0, got {margin!r}")
    mask = _mask(inputs)
    old = _need(inputs, "old_logp", "mastery_hinge_kl").detach()
    success = _need(inputs, "group_success", "mastery_hinge_kl")
    kl = kl_k3(torch.where(mask > 0, inputs.logp, 0.0), torch.where(mask > 0, old, 0.0))  # [N, T] KL(πθ‖πold) k3
    mastered = (success >= mastered_at)[:, None] & (mask > 0)  # [N, T]
    return torch.where(mastered, (kl - margin).clamp_min(0.0), 0.0)


@REGULARIZERS.register(
    "hazard_penalty",
    formula="ℓ = logπθ − logπold; L_it = (max(ℓ,0)/λ₊)^k₊ + (max(−ℓ,0)/λ₋)^k₋ (Weibull cumulative hazards)",
    source="[181] MHPO (Decoupled Hazard Penalty)",
    summary="Smooth penalties on log-ratio expansion and contraction, each with its own cumulative hazard.",
)
def hazard_penalty(
    inputs: RegularizerInputs,
    *,
    scale_pos: float = 0.2,
    scale_neg: float = 0.2,
    shape_pos: float = 2.0,
    shape_neg: float = 2.0,
) -> Tensor:
    """MHPO's Decoupled Hazard Penalty [181]: the cumulative hazard ``H(x)`` of a survival law is applied separately
    to the positive shift ``x = max(ℓ, 0)`` (over-expansion, which leads to mode collapse) and to the negative shift
    ``x = max(−ℓ, 0)`` (contraction, which erodes the policy) of the per-action log-ratio ``ℓ = logπθ − logπold``.

    Reading chosen: the abstract names cumulative hazard functions but not the law; genalign uses the Weibull hazard
    ``H(x) = (x/λ)^k``, so the penalty is 0 at ``ℓ = 0`` and grows smoothly (for ``k > 1``, with zero slope at the
    origin) and independently on each side. MHPO = ``clip: log_fidelity`` + ``regularizer: hazard_penalty``.

    Args:
        inputs: needs ``logp`` (grad), ``old_logp`` and ``mask``.
        scale_pos, scale_neg: Weibull scales ``λ₊, λ₋ > 0`` (the log-ratio shift at which the hazard reaches 1).
        shape_pos, shape_neg: Weibull shapes ``k₊, k₋ >= 1`` (1: linear, 2: quadratic growth).
    Returns:
        ``[N, T]`` non-negative penalty (0 on padding; grad through ``logp``).
    """
    if not (scale_pos > 0 and scale_neg > 0):
        raise ValueError(f"scale_pos and scale_neg must be > 0, got {scale_pos!r}, {scale_neg!r}")
    if not (shape_pos >= 1 and shape_neg >= 1):
        raise ValueError(f"shape_pos and shape_neg must be >= 1 (convex hazards), got {shape_pos!r}, {shape_neg!r}")
    mask = _mask(inputs)
    old = _need(inputs, "old_logp", "hazard_penalty").detach()
    log_ratio = torch.where(mask > 0, inputs.logp - old, 0.0)  # [N, T]
    expansion = (log_ratio.clamp_min(0.0) / scale_pos).pow(shape_pos)  # [N, T]
    contraction = ((-log_ratio).clamp_min(0.0) / scale_neg).pow(shape_neg)  # [N, T]
    return torch.where(mask > 0, expansion + contraction, 0.0)


def _vocab(inputs: RegularizerInputs, option: str) -> Tensor:
    """``inputs.vocab`` ``[N, T]`` checked against ``logp``, 0 on padding."""
    mask = _mask(inputs)
    vocab = check_float_tensor(_need(inputs, "vocab", option), "inputs.vocab", "[N, T]")
    if tuple(vocab.shape) != tuple(mask.shape):
        raise ValueError(f"inputs.vocab must have shape [N, T] = {list(mask.shape)}, got {list(vocab.shape)}")
    return torch.where(mask > 0, vocab, 0.0)  # [N, T]


def _scaled_logits(logits: Tensor, option: str) -> Tensor:
    logits = check_float_tensor(logits, f"{option} logits", "[n, V]")
    if logits.ndim != 2:
        raise ValueError(f"{option}: logits must have shape [n, V] (one chunk of actions), got {list(logits.shape)}")
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def _check_noise_ratio(noise_ratio: float) -> None:
    if not 0 <= noise_ratio < 1:
        raise ValueError(f"noise_ratio must be in [0, 1), got {noise_ratio!r}")


def low_probability_term(logits: Tensor, *, noise_ratio: float = 0.02) -> Tensor:
    """Per-action value of :func:`low_probability` [206] on one chunk of actions.

    Args:
        logits: ``[n, V]`` next-token logits of ``n`` actions at the sampling temperature (``z / T``; grad).
        noise_ratio: ``κ`` in ``[0, 1)``.
    Returns:
        ``[n]`` ``KL(q ‖ πθ)``, ``q`` the detached proxy: ``πθ`` without the tokens below ``κ·max πθ``, renormalised.
    """
    _check_noise_ratio(noise_ratio)
    log_probs = torch.log_softmax(_scaled_logits(logits, "low_probability"), dim=-1)  # [n, V]
    with torch.no_grad():
        floor = math.log(noise_ratio) if noise_ratio > 0 else -math.inf
        keep = log_probs >= log_probs.max(-1, keepdim=True).values + floor  # [n, V]
        proxy = torch.log_softmax(log_probs.masked_fill(~keep, -torch.inf), dim=-1)  # [n, V]
    return torch.where(keep, proxy.exp() * (proxy - log_probs), 0.0).sum(-1)  # [n]


@REGULARIZERS.register(
    "low_probability",
    needs=("vocab",),
    vocab_term=low_probability_term,
    formula="q = sg(renormalise(π · 1[π ≥ κ·max π])); L_it = KL(q ‖ πθ) over the vocabulary",
    source="[206] Lp-Reg",
    summary="Soft KL toward a proxy policy with presumed-noise tokens filtered out and renormalised.",
)
def low_probability(inputs: RegularizerInputs, *, noise_ratio: float = 0.02) -> Tensor:
    """Low-probability regularisation [206]: the proxy distribution is the current policy with the presumed-noise
    tokens removed and the rest renormalised, which raises the relative probability of low-but-meaningful tokens
    ("reasoning sparks"); a forward KL from the (detached) proxy to the policy keeps them alive.

    Reading chosen: a token is noise when its probability is below ``noise_ratio`` times the most likely token's;
    ``π`` is the policy at the sampling temperature (the law ``logp`` scores). The per-action math is
    :func:`low_probability_term`, evaluated by the policy inside its chunked log-prob pass.

    Args:
        inputs: needs ``vocab`` ``[N, T]`` (grad; ``policy.score(vocab_term=...)``) and ``mask``.
        noise_ratio: ``κ`` in ``[0, 1)``.
    Returns:
        ``[N, T]`` non-negative loss (0 on padding).
    """
    _check_noise_ratio(noise_ratio)
    return _vocab(inputs, "low_probability")


def _check_temperature(temperature: float) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")


def distribution_entropy_term(logits: Tensor, *, temperature: float = 1.2) -> Tensor:
    """Per-action value of :func:`distribution_entropy` [287] on one chunk of actions.

    Args:
        logits: ``[n, V]`` next-token logits of ``n`` actions at the sampling temperature (``z / T``; grad).
        temperature: ``τ > 0``; 1 gives 0.
    Returns:
        ``[n]`` ``KL(q ‖ πθ)`` with the detached target ``q = softmax(logits / τ)``.
    """
    _check_temperature(temperature)
    logits = _scaled_logits(logits, "distribution_entropy")
    log_probs = torch.log_softmax(logits, dim=-1)  # [n, V]
    target = torch.log_softmax(logits.detach() / temperature, dim=-1)  # [n, V]
    return (target.exp() * (target - log_probs)).sum(-1)  # [n]


@REGULARIZERS.register(
    "distribution_entropy",
    needs=("vocab",),
    vocab_term=distribution_entropy_term,
    formula="q = sg(softmax(z / τ)); L_it = KL(q ‖ πθ) over the vocabulary (τ > 1 raises entropy, τ < 1 lowers it)",
    source="[287] distribution-centric entropy regularisation",
    summary="Entropy control at the distribution level: pull the policy toward its own tempered distribution.",
)
def distribution_entropy(inputs: RegularizerInputs, *, temperature: float = 1.2) -> Tensor:
    """Distribution-level entropy regularisation [287]: instead of a token-entropy bonus, the policy is regularised
    toward a target distribution, here its own tempered copy (fully on-policy, no extra sampling); ``τ`` sets the
    direction and strength of the entropy change.

    Reading chosen: the target ``softmax(z/τ)`` (detached) and the forward KL; the paper's "better" target is not
    specified in the abstract. ``z`` are the logits at the sampling temperature. The per-action math is
    :func:`distribution_entropy_term`, evaluated by the policy inside its chunked log-prob pass.

    Args:
        inputs: needs ``vocab`` ``[N, T]`` (grad; ``policy.score(vocab_term=...)``) and ``mask``.
        temperature: ``τ > 0``; 1 gives a zero loss.
    Returns:
        ``[N, T]`` non-negative loss (0 on padding).
    """
    _check_temperature(temperature)
    return _vocab(inputs, "distribution_entropy")


def bind_vocab_term(name: str, **hp) -> Callable[[Tensor], Tensor]:
    """The vocabulary term of regulariser ``name`` with its hyper-parameters bound: ``fn(logits [n, V]) -> [n]``.

    This is what the trainer passes to ``policy.score(vocab_term=...)`` for an option with ``needs=("vocab",)``.
    Raises a ``ValueError`` for an option that has no vocabulary term, and for bad hyper-parameters.
    """
    term = REGULARIZERS.meta(name).get("vocab_term")
    if term is None:
        raise ValueError(f"regularizer {name!r} has no vocabulary term (it does not need 'vocab')")
    bound = partial(term, **hp)
    bound(torch.zeros(1, 2))  # validates the hyper-parameters before any model runs
    return bound


#: docs meta of :func:`future_kl_advantages` (a function, not a registry option; listed by ``docs.py``)
FUTURE_KL_META = {
    "formula": "A_it = A_i − β·Σ_{j≥t} m_j·k1_j, added after the advantages are normalised",
    "source": "[75] FRPO",
    "summary": "Future-KL return-to-go: reverse cumulative KL to the reference subtracted from each action's advantage.",
}


def future_kl_advantages(advantages: Tensor, kl_per_action: Tensor, mask: Tensor, *, coef: float) -> Tensor:
    """Future-KL return-to-go of FRPO [75]: after the advantages are built (and normalised), each action's advantage
    gets ``−β · Σ_{j ≥ t} m_j·k1_j``, the reverse cumulative sum of per-action log-ratios to the reference (a
    reverse-KL return-to-go). Reward and KL are never fused before normalisation.

    The trainer calls it after ``compute_advantages`` (and credit weights) with ``k1`` per action from the scoring pass
    before the update (``policy.score(kl_estimator="k1")``, detached), then passes the ``[N, T]`` result to
    ``policy_loss``.

    Args:
        advantages: ``[N]`` or ``[N, T]``.
        kl_per_action: ``[N, T]`` ``k1 = logπθ − logπ_ref`` of each action (constant).
        mask: ``[N, T]`` 1 where an action is trained.
        coef: ``β >= 0``.
    Returns:
        ``[N, T]`` shaped advantages (0 on padding).
    """
    if not coef >= 0:
        raise ValueError(f"coef must be >= 0, got {coef!r}")
    kl_per_action = check_float_tensor(kl_per_action, "kl_per_action", "[N, T]")
    if kl_per_action.ndim != 2:
        raise ValueError(f"kl_per_action must have shape [N, T], got {list(kl_per_action.shape)}")
    shape = tuple(kl_per_action.shape)
    mask = check_mask(mask, shape, kl_per_action.dtype)
    advantages = expand_advantages(advantages, shape).to(kl_per_action.dtype)  # [N, T]
    masked = torch.where(mask > 0, kl_per_action.detach(), 0.0)  # [N, T]
    to_go = masked.flip(1).cumsum(1).flip(1)  # [N, T] Σ_{j ≥ t}
    return torch.where(mask > 0, advantages - coef * to_go, 0.0)
