"""Policy optimisation restricted to a set of promising tokens: the policy renormalised over the most likely tokens
(regulariser of :data:`~genalign.algorithms.regularizers.base.REGULARIZERS`; experimental tier).

The renormalised policy ``π_S(o) = π(o) / Σ_{v∈S} π(v)`` has ``log π_S(o) = log π(o) − log Z_S``. The trainer's
objective already carries ``−A·log π(o)`` (times the ratio); adding ``A·log Z_S`` per action makes the on-policy
gradient exactly that of ``−A·log π_S(o)``: the update only redistributes probability inside ``S``, and the tail of
the vocabulary outside ``S`` gets no gradient. ``log Z_S`` is a vocabulary term, evaluated inside the policy's chunked
log-prob pass (no ``[N, T, V]`` logits).
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._validation import expand_advantages
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.regularizers.base import REGULARIZERS, valid_mask
from genalign.algorithms.scores import ScoreOutput


def _check(top_k: int, top_p: float) -> None:
    if not (isinstance(top_k, int) and top_k >= 1 and 0 < top_p <= 1):
        raise ValueError(f"promising_tokens needs an integer top_k >= 1 and 0 < top_p <= 1, got {top_k!r}, {top_p!r}")


def _mass_of_set(log_probs: Tensor, chooser: Tensor, top_k: int, top_p: float) -> Tensor:
    """``[n]`` ``logsumexp`` of ``log_probs`` ``[n, V]`` (grad) over ``S`` = the top-k (nucleus top-p) tokens of
    ``chooser`` ``[n, V]`` (log-probs, no grad)."""
    k = min(top_k, chooser.shape[-1])
    top = chooser.detach().topk(k, dim=-1)  # [n, k] descending
    before = top.values.exp().cumsum(-1) - top.values.exp()  # [n, k] mass of the more likely candidates
    inside = before < top_p  # [n, k] the nucleus among the top k (the first one always)
    chosen = log_probs.gather(1, top.indices)  # [n, k] (grad)
    return torch.logsumexp(torch.where(inside, chosen, -torch.inf), dim=-1)  # [n]


def promising_mass_term(logits: Tensor, *, top_k: int = 20, top_p: float = 1.0) -> Tensor:
    """Per-action vocabulary term of :func:`promising_tokens` on one chunk of actions.

    Args:
        logits: ``[n, V]`` next-token logits at the sampling temperature (grad).
        top_k: the ``k`` most likely tokens form the promising set ``S`` (chosen without gradient).
        top_p: within them, only the smallest prefix whose probability reaches ``top_p`` (nucleus; 1 keeps all ``k``).
    Returns:
        ``[n]`` ``log Z_S = logsumexp_{v∈S} log π(v)`` (grad through the probabilities of ``S``; 0 when ``S`` is the
        whole vocabulary).
    """
    _check(top_k, top_p)
    log_probs = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)  # [n, V]
    return _mass_of_set(log_probs, log_probs, top_k, top_p)


def reference_promising_mass_term(
    log_probs: Tensor, ref_log_probs: Tensor, *, top_k: int = 20, top_p: float = 1.0
) -> Tensor:
    """Per-action reference term of :func:`reference_promising_tokens` on one chunk of actions.

    Args:
        log_probs: ``[n, V]`` the policy's next-token log-probs at the sampling temperature (grad).
        ref_log_probs: ``[n, V]`` the reference's (the base model's) at the same states (no grad).
        top_k, top_p: the promising set ``S``: the reference's ``top_k`` most likely tokens, cut to a ``top_p``
            nucleus of the reference's probabilities.
    Returns:
        ``[n]`` ``log Z_S = logsumexp_{v∈S} log π(v)`` of the policy over the reference's set (grad).
    """
    _check(top_k, top_p)
    return _mass_of_set(log_probs, ref_log_probs, top_k, top_p)


def _renormalised_policy_term(score: ScoreOutput, advantages: Tensor, batch: StepBatch, feature: str, who: str):
    """``[N, T]`` ``A·log Z_S`` from the per-action ``log Z_S`` of score feature ``feature`` (0 on padding)."""
    mask = valid_mask(score, batch)  # [N, T]
    log_mass = score.require(feature, who)  # [N, T]
    per_action = expand_advantages(advantages, tuple(mask.shape)).to(log_mass.dtype).detach()  # [N, T]
    return torch.where(mask > 0, per_action * log_mass, 0.0)  # [N, T]


@REGULARIZERS.register(
    "promising_tokens",
    needs=("vocab_term",),
    vocab_term=promising_mass_term,
    formula="S_it = the top-k (nucleus top-p) tokens of sg(π); Z_S = Σ_{v∈S} π(v); L_it = A_it·log Z_S,it "
    "(coef 1: the on-policy gradient of −A·log π_S(o), π_S = π/Z_S on S)",
    source="[227] RLPT (RL with promising tokens)",
    summary="Restrict the policy update to a set of promising tokens: the policy is renormalised over its most "
    "likely tokens, so the vocabulary tail gets no gradient.",
)
def promising_tokens(
    score: ScoreOutput, advantages: Tensor, batch: StepBatch, *, top_k: int = 20, top_p: float = 1.0
) -> Tensor:
    """RL with Promising Tokens [227]: the action space of the policy is the full vocabulary, whose long tail of
    contextually irrelevant tokens distracts the update; RLPT decouples the decision among the reasonable tokens from
    token generation by masking the policy to a dynamic set of promising tokens. With ``regularizer_coef = 1`` this
    term turns the objective's ``−A·log π(o)`` into ``−A·log π_S(o)`` (module docstring): the gradient moves mass only
    among the tokens of ``S``.

    Reading chosen: the promising set is the ``top_k`` most likely tokens (optionally cut to a ``top_p`` nucleus) of
    the policy itself, detached; the abstract takes it from the base model's semantic priors, which the policy's own
    distribution equals at the start of training (the vocabulary term sees one chunk of the policy's logits, not the
    reference's). The correction is the on-policy (unclipped) form: with several optimizer steps per rollout it is
    not multiplied by the importance ratio. Sample with ``policy.top_k = top_k`` so the sampled token lies in ``S``
    (a sampled token outside ``S`` keeps the ordinary gradient plus this term).

    Args:
        score, advantages, batch: read ``vocab_term`` ``[N, T]`` (grad; ``log Z_S``), the advantages ``[N]`` or
            ``[N, T]`` and ``mask``.
        top_k: ``k >= 1``.
        top_p: in ``(0, 1]``.
    Returns:
        ``[N, T]`` ``A·log Z_S`` (0 on padding).
    """
    _check(top_k, top_p)
    return _renormalised_policy_term(score, advantages, batch, "vocab_term", "promising_tokens")


@REGULARIZERS.register(
    "reference_promising_tokens",
    needs=("ref_vocab_term",),
    ref_vocab_term=reference_promising_mass_term,
    formula="S_it = the top-k (nucleus top-p) tokens of the reference (base model) π_ref(·|s_it); Z_S = Σ_{v∈S} "
    "πθ(v|s_it); L_it = A_it·log Z_S,it (coef 1: the on-policy gradient of −A·log π_S(o), π_S = πθ/Z_S on S)",
    source="[227] RLPT (RL with promising tokens: the promising set from the base model's priors)",
    summary="The policy update restricted to the base model's promising tokens: the policy is renormalised over the "
    "reference's most likely tokens at each state, so the rest of the vocabulary gets no gradient.",
)
def reference_promising_tokens(
    score: ScoreOutput, advantages: Tensor, batch: StepBatch, *, top_k: int = 20, top_p: float = 1.0
) -> Tensor:
    """RL with Promising Tokens [227] as the abstract puts it: the promising set comes from the base model's semantic
    priors, here the frozen reference's top ``top_k`` tokens (nucleus ``top_p``) at each state, computed inside the
    policy's chunked head pass from the reference's hidden states (score feature ``ref_vocab_term``: no ``[N, T, V]``
    logits); the term is ``A·log Z_S`` of the policy's mass on that set, so with ``regularizer_coef = 1`` the objective's
    ``−A·log π(o)`` becomes ``−A·log π_S(o)`` and only the tokens of ``S`` move (:func:`promising_tokens` takes the set
    from the policy itself instead).

    Reading chosen: the on-policy (unclipped) form of the renormalisation, as :func:`promising_tokens`; the set is fixed
    by the reference (the base weights), so it does not drift with the policy. Sample with ``policy.top_k = top_k``
    only when the policy's top tokens stay within the reference's; a sampled token outside ``S`` keeps its ordinary
    gradient plus this term.

    Args:
        score, advantages, batch: read ``ref_vocab_term`` ``[N, T]`` (grad; ``log Z_S``), the advantages ``[N]`` or
            ``[N, T]`` and ``mask``.
        top_k: ``k >= 1``.
        top_p: in ``(0, 1]``.
    Returns:
        ``[N, T]`` ``A·log Z_S`` (0 on padding).
    """
    _check(top_k, top_p)
    return _renormalised_policy_term(score, advantages, batch, "ref_vocab_term", "reference_promising_tokens")
