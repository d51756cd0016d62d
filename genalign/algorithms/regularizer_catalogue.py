"""Per-action regularisers of the method catalogue, and the future-KL advantage shaping.

A regulariser returns a per-action loss ``[N, T]`` that the trainer adds to the policy loss before aggregation,
exactly like the KL penalty and the entropy bonus (formulas.md §4)::

    inputs = RegularizerInputs(logp=out.logp, mask=mask, old_logp=old, advantages=adv, entropy=out.entropy, ...)
    per_action = per_action + coef * REGULARIZERS.get(name)(inputs, **args)        # [m, T]

Fixed signature ``fn(inputs: RegularizerInputs, **hp) -> [N, T]`` (0 on padding); each option names the fields it
needs and raises a ``ValueError`` naming a missing one. Not wired into the trainer yet: see each option for what the
trainer must pass (``logits`` need the policy adapter to return them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
        logits: ``[N, T, V]`` next-token logits at each action (grad).
        group_success: ``[N]`` mean reward of each sample's group (0/1 rewards: the success rate ``p``).
    """

    logp: Tensor
    mask: Tensor
    old_logp: Tensor | None = None
    advantages: Tensor | None = None
    entropy: Tensor | None = None
    kl: Tensor | None = None
    logits: Tensor | None = None
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


def _logits(inputs: RegularizerInputs, option: str) -> Tensor:
    logits = check_float_tensor(_need(inputs, "logits", option), "inputs.logits", "[N, T, V]")
    if logits.ndim != 3 or tuple(logits.shape[:2]) != tuple(inputs.logp.shape):
        raise ValueError(f"inputs.logits must have shape [N, T, V] with [N, T] = {list(inputs.logp.shape)}")
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


@REGULARIZERS.register(
    "low_probability",
    needs=("logits",),
    formula="q = sg(renormalise(π · 1[π ≥ κ·max π])); L_it = KL(q ‖ πθ) over the vocabulary",
    source="[206] Lp-Reg",
    summary="Soft KL toward a proxy policy with presumed-noise tokens filtered out and renormalised.",
)
def low_probability(inputs: RegularizerInputs, *, noise_ratio: float = 0.02) -> Tensor:
    """Low-probability regularisation [206]: the proxy distribution is the current policy with the presumed-noise
    tokens removed and the rest renormalised, which raises the relative probability of low-but-meaningful tokens
    ("reasoning sparks"); a forward KL from the (detached) proxy to the policy keeps them alive.

    Reading chosen: a token is noise when its probability is below ``noise_ratio`` times the most likely token's.

    Args:
        inputs: needs ``logits`` ``[N, T, V]`` (grad) and ``mask``.
        noise_ratio: ``κ`` in ``[0, 1)``.
    """
    if not 0 <= noise_ratio < 1:
        raise ValueError(f"noise_ratio must be in [0, 1), got {noise_ratio!r}")
    mask = _mask(inputs)
    log_probs = torch.log_softmax(_logits(inputs, "low_probability"), dim=-1)  # [N, T, V]
    with torch.no_grad():
        keep = log_probs >= log_probs.max(-1, keepdim=True).values + torch.log(torch.tensor(max(noise_ratio, 1e-300)))
        proxy = torch.log_softmax(log_probs.masked_fill(~keep, -torch.inf), dim=-1)  # [N, T, V]
    kl = torch.where(keep, proxy.exp() * (proxy - log_probs), 0.0).sum(-1)  # [N, T]
    return torch.where(mask > 0, kl, 0.0)


@REGULARIZERS.register(
    "distribution_entropy",
    needs=("logits",),
    formula="q = sg(softmax(z / τ)); L_it = KL(q ‖ πθ) over the vocabulary (τ > 1 raises entropy, τ < 1 lowers it)",
    source="[287] distribution-centric entropy regularisation",
    summary="Entropy control at the distribution level: pull the policy toward its own tempered distribution.",
)
def distribution_entropy(inputs: RegularizerInputs, *, temperature: float = 1.2) -> Tensor:
    """Distribution-level entropy regularisation [287]: instead of a token-entropy bonus, the policy is regularised
    toward a target distribution, here its own tempered copy (fully on-policy, no extra sampling); ``τ`` sets the
    direction and strength of the entropy change.

    Reading chosen: the target ``softmax(z/τ)`` (detached) and the forward KL; the paper's "better" target is not
    specified in the abstract.

    Args:
        inputs: needs ``logits`` ``[N, T, V]`` (grad) and ``mask``.
        temperature: ``τ > 0``; 1 gives a zero loss.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    mask = _mask(inputs)
    logits = _logits(inputs, "distribution_entropy")
    log_probs = torch.log_softmax(logits, dim=-1)  # [N, T, V]
    target = torch.log_softmax(logits.detach() / temperature, dim=-1)  # [N, T, V]
    kl = (target.exp() * (target - log_probs)).sum(-1)  # [N, T]
    return torch.where(mask > 0, kl, 0.0)


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
