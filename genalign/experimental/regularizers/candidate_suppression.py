"""Suppression of error-inducing candidate tokens at the positions a token judge marks (TLPO [105]), as a
vocabulary regulariser evaluated inside the policy's chunked log-prob pass (experimental tier)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.regularizers.base import REGULARIZERS, valid_mask
from genalign.algorithms.scores import ScoreOutput
from genalign.experimental.regularizers.vocabulary import _scaled_logits, _vocab
from genalign.rewards.token_judges import script_of


def off_script_tokens(texts: Sequence[str], allowed_scripts: Sequence[str]) -> Tensor:
    """``[V]`` bool: the vocabulary entries (their decoded ``texts``) holding a letter of a script outside
    ``allowed_scripts`` (:func:`~genalign.rewards.token_judges.script_of`)."""
    allowed = set(allowed_scripts)
    return torch.tensor([bool({script_of(c) for c in text} - {None} - allowed) for text in texts], dtype=torch.bool)


@functools.lru_cache(maxsize=8)
def vocabulary_off_script(tokenizer: str, allowed_scripts: tuple[str, ...]) -> Tensor:
    """:func:`off_script_tokens` of the vocabulary of ``tokenizer`` (a model folder, hub id or ``builtin:<name>``),
    decoded once per tokenizer and script set."""
    from genalign.assets import model_location
    from genalign.policies.lm.tokenizer import load_tokenizer

    loaded = load_tokenizer(model_location(tokenizer, field="algorithm.regularizer.tokenizer", marker=None))
    texts = loaded.batch_decode([[i] for i in range(len(loaded))], skip_special_tokens=True)
    return off_script_tokens(texts, allowed_scripts)


def suppression_term(logits: Tensor, off_script: Tensor) -> Tensor:
    """``[n]`` ``−log(1 − Σ_{v ∈ D} π(v))`` of ``logits`` ``[n, V]`` (grad) with ``D`` = ``off_script`` ``[V']``
    (entries beyond ``V'``, e.g. a padded embedding table, are not in ``D``): the unlikelihood of the whole set of
    error-inducing candidates."""
    logits = _scaled_logits(logits, "candidate_suppression")
    flags = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
    flags[: min(len(off_script), len(flags))] = off_script[: len(flags)].to(logits.device)
    if not bool(flags.any()):
        return logits.new_zeros(logits.shape[0])
    kept = torch.logsumexp(logits.masked_fill(flags, -torch.inf), dim=-1)  # [n] log Σ_{v ∉ D} exp z_v
    return torch.logsumexp(logits, dim=-1) - kept  # [n] = −log(1 − π(D))


def candidate_suppression_term(logits: Tensor, *, tokenizer: str, allowed_scripts: Sequence[str]) -> Tensor:
    """Per-action value of :func:`candidate_suppression` on one chunk of actions (``logits`` ``[n, V]``) -> ``[n]``."""
    return suppression_term(logits, vocabulary_off_script(tokenizer, tuple(allowed_scripts)))


@REGULARIZERS.register(
    "candidate_suppression",
    needs=("vocab_term", "token_judgement"),
    vocab_term=candidate_suppression_term,
    formula="D = vocabulary tokens with a letter outside the allowed scripts; L_it = −log(1 − Σ_{v∈D} π(v | s_t)) "
    "at the judged error positions (j_it < 0), else 0",
    source="[105] TLPO (candidate tokens at error-prone positions)",
    summary="At the positions a token judge marks as language-confusion errors, push down the probability of "
    "every candidate token in a wrong script, not just the sampled one.",
)
def candidate_suppression(
    score: ScoreOutput, advantages: Tensor, batch: StepBatch, *, tokenizer: str, allowed_scripts: Sequence[str]
) -> Tensor:
    """TLPO [105]: at error-prone positions (those a token judge marks: ``script_mismatch`` flags words in another
    script than the row's language), the candidate tokens are explored and the error-inducing ones suppressed. Over
    the vocabulary: every candidate whose text holds a letter outside ``allowed_scripts`` is an error-inducing
    candidate, and the loss ``−log(1 − π(D))`` (unlikelihood of the whole set) moves their mass to the well-formed
    candidates at that position. Positions the judge did not mark get no loss, so the update stays local.

    Reading chosen: the candidate set is the whole vocabulary classified by script (the language identifier over
    candidates), not a sampled shortlist, and one allowed script set serves the run (the target language of the
    data); the sampled error token itself is handled by the credit rule ``localized_suppression``.

    Args:
        score, advantages, batch: read ``vocab_term`` ``[N, T]`` (grad), ``mask`` and ``token_judgement``.
        tokenizer: the policy's tokenizer (the same value as ``policy.model``).
        allowed_scripts: Unicode scripts of the target language (e.g. ``["HANGUL", "CJK"]``; see
            :data:`~genalign.rewards.token_judges.LANGUAGE_SCRIPTS`).
    Returns:
        ``[N, T]`` non-negative loss, 0 off the judged error positions and on padding.
    """
    if not allowed_scripts or not all(isinstance(s, str) and s for s in allowed_scripts):
        raise ValueError(f"candidate_suppression: allowed_scripts={allowed_scripts!r} must name the target language's "
                         "scripts, e.g. ['LATIN'] or ['HANGUL', 'CJK']")  # fmt: skip
    term = _vocab(score, batch, "candidate_suppression")  # [N, T]
    judged = batch.require("token_judgement", "regularizer 'candidate_suppression'").to(term.device)
    error = (valid_mask(score, batch) > 0) & (judged < 0)  # [N, T]
    return torch.where(error, term, 0.0)
