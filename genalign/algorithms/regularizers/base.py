"""Per-action regularisers of the method catalogue, and the future-KL advantage shaping.

A regulariser returns a per-action loss ``[N, T]`` that the trainer adds to the policy loss before aggregation,
exactly like the KL penalty and the entropy bonus (formulas.md §4)::

    inputs = RegularizerInputs(logp=out.logp, mask=mask, old_logp=old, advantages=adv, entropy=out.entropy, ...)
    per_action = per_action + coef * REGULARIZERS.get(name)(inputs, **args)        # [m, T]

Fixed signature ``fn(inputs: RegularizerInputs, **hp) -> [N, T]`` (0 on padding); each option names the fields it
needs (registry meta ``needs``) and raises a ``ValueError`` naming a missing one.

Options over the whole vocabulary (``needs=("vocab_term",)``) never see ``[N, T, V]`` logits: their math is a
per-token function of one chunk of scaled logits, ``term(logits [n, V], **hp) -> [n]`` (registry meta ``vocab_term``). The
trainer binds it with :func:`bind_vocab_term` and hands it to the policy, which evaluates it inside its chunked
log-prob pass (:func:`genalign.policies.lm.logprobs.completion_scores`) and returns ``ScoreOutput.vocab_term``
``[N, T]``; the option then reads that value from ``RegularizerInputs.vocab``::

    term = bind_vocab_term(name, **hp)                                   # logits [n, V] -> [n]
    out = policy.score(batch, ScoreRequest(vocab_term=term))             # out.vocab_term [m, T] (grad)
    inputs = RegularizerInputs(logp=out.logp, mask=mask, vocab=out.vocab_term)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from genalign.algorithms._validation import check_float_tensor, check_mask
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
        kl: per-action KL estimate to the reference policy (grad), ``ScoreOutput.kl``.
        vocab: per-action value of the option's vocabulary term (grad), computed by the policy inside its chunked
            log-prob pass: ``ScoreOutput.vocab_term`` of ``ScoreRequest(vocab_term=bind_vocab_term(name, **hp))``.
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


def need(inputs: RegularizerInputs, name: str, option: str) -> Tensor:
    value = getattr(inputs, name)
    if value is None:
        raise ValueError(f"regularizer {option!r} needs RegularizerInputs.{name}, which is None")
    return value


def valid_mask(inputs: RegularizerInputs) -> Tensor:
    logp = check_float_tensor(inputs.logp, "inputs.logp", "[N, T]")
    if logp.ndim != 2:
        raise ValueError(f"inputs.logp must have shape [N, T], got {list(logp.shape)}")
    return check_mask(inputs.mask, tuple(logp.shape), logp.dtype)


def bind_vocab_term(name: str, **hp) -> Callable[[Tensor], Tensor]:
    """The vocabulary term of regulariser ``name`` with its hyper-parameters bound: ``fn(logits [n, V]) -> [n]``.

    This is what the trainer passes to ``policy.score`` (``ScoreRequest(vocab_term=...)``) for an option with
    ``needs=("vocab_term",)``.
    Raises a ``ValueError`` for an option that has no vocabulary term, and for bad hyper-parameters.
    """
    term = REGULARIZERS.meta(name).get("vocab_term")
    if term is None:
        raise ValueError(f"regularizer {name!r} has no vocabulary term (it does not need 'vocab')")
    bound = partial(term, **hp)
    bound(torch.zeros(1, 2))  # validates the hyper-parameters before any model runs
    return bound


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy ``H = logsumexp(z) − Σ softmax(z)·z`` of the categorical distribution over the last axis.

    Numerically stable for large logits and for ``-inf`` logits (masked vocabulary entries); computed in float32
    (float64 inputs stay float64).

    Args:
        logits: ``[..., V]``.
    Returns:
        ``[...]`` entropy in nats.
    """
    logits = check_float_tensor(logits, "logits", "[..., V]")
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    log_z = torch.logsumexp(logits, dim=-1)  # [...]
    probs = torch.softmax(logits, dim=-1)  # [..., V]
    return log_z - torch.where(probs > 0, probs * logits, 0.0).sum(-1)  # [...]; -inf logits (masked vocab) give 0


def entropy_bonus(entropy: Tensor, coef: float) -> Tensor:
    """Per-action loss term ``−coef · H`` ``[N, T]``; add it to the policy loss before aggregation (formulas.md §4).

    Args:
        entropy: ``[N, T]`` per-action entropy (with grad, e.g. :func:`entropy_from_logits`).
        coef: entropy coefficient (> 0 encourages exploration).
    """
    entropy = check_float_tensor(entropy, "entropy", "[N, T]")
    return -coef * entropy  # [N, T]
