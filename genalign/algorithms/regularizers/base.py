"""Per-action regularisers: the registry :data:`REGULARIZERS`, its signature, and the vocabulary-term binding.

A regulariser returns a per-action loss ``[N, T]`` that the trainer adds to the policy loss before aggregation,
exactly like the KL penalty and the entropy bonus (formulas.md §4), with the objectives' signature::

    fn(score: ScoreOutput, advantages [N] | [N, T], batch: StepBatch, **hp) -> [N, T]   (0 on padding)

``score`` is the micro-batch's scoring pass (``logp``, and the features with gradient: ``entropy``, ``kl``,
``vocab_term``), ``batch`` its slice of the step batch (``mask``, ``old_logp``, ``group_mean_reward``, ...). Each
option names the signals it needs (registry meta ``needs``) and raises a ``ValueError`` naming a missing one.

Options over the whole vocabulary (``needs=("vocab_term",)``) never see ``[N, T, V]`` logits: their math is a
per-token function of one chunk of scaled logits, ``term(logits [n, V], **hp) -> [n]`` (registry meta ``vocab_term``). The
trainer binds it with :func:`bind_vocab_term` and asks the policy for the feature ``vocab_term`` with it, which the
policy evaluates inside its chunked log-prob pass (:func:`genalign.policies.lm.logprobs.completion_scores`)::

    term = bind_vocab_term(name, **hp)                                        # logits [n, V] -> [n]
    out = policy.score(batch, ScoreRequest.of(vocab_term=term))               # out["vocab_term"] [m, T] (grad)
    loss = REGULARIZERS.get(name)(out, advantages, step_batch, **hp)          # [m, T]
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor

from genalign.algorithms._validation import check_float_tensor, check_mask
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.scores import ScoreOutput
from genalign.registry import Registry

Regularizer = Callable[..., Tensor]


#: name -> ``fn(score: ScoreOutput, advantages, batch: StepBatch, **hp) -> per-action loss [N, T]``
REGULARIZERS: Registry[Regularizer] = Registry("regularizer", catalogue="genalign.experimental.regularizers")


def valid_mask(score: ScoreOutput, batch: StepBatch) -> Tensor:
    """The batch's ``mask`` ``[N, T]`` in the dtype of ``score.logp``, checked against its shape."""
    logp = check_float_tensor(score.logp, "score.logp", "[N, T]")
    if logp.ndim != 2:
        raise ValueError(f"score.logp must have shape [N, T], got {list(logp.shape)}")
    return check_mask(batch.require("mask", "a regulariser"), tuple(logp.shape), logp.dtype)


def bind_vocab_term(name: str, **hp) -> Callable[[Tensor], Tensor]:
    """The vocabulary term of regulariser ``name`` with its hyper-parameters bound: ``fn(logits [n, V]) -> [n]``.

    This is the parameter of the score feature ``vocab_term`` the trainer requests for an option with
    ``needs=("vocab_term",)``.
    Raises a ``ValueError`` for an option that has no vocabulary term, and for bad hyper-parameters.
    """
    term = REGULARIZERS.meta(name).get("vocab_term")
    if term is None:
        raise ValueError(f"regularizer {name!r} has no vocabulary term (it does not need 'vocab')")
    bound = partial(term, **hp)
    bound(torch.zeros(1, 2))  # validates the hyper-parameters before any model runs
    return bound


def bind_reference_vocab_term(name: str, **hp) -> Callable[[Tensor, Tensor], Tensor]:
    """The reference pair term of regulariser ``name`` with its hyper-parameters bound: ``fn(log_probs [n, V] (grad),
    ref_log_probs [n, V]) -> [n]``, the parameter of the score feature ``ref_vocab_term`` (an option with
    ``needs=("ref_vocab_term",)`` and registry meta ``ref_vocab_term``). Raises a ``ValueError`` for an option without
    one and for bad hyper-parameters."""
    term = REGULARIZERS.meta(name).get("ref_vocab_term")
    if term is None:
        raise ValueError(f"regularizer {name!r} has no reference vocabulary term (it does not need 'ref_vocab_term')")
    bound = partial(term, **hp)
    bound(torch.zeros(1, 2), torch.zeros(1, 2))  # validates the hyper-parameters before any model runs
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
