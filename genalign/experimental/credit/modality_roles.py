"""Advantage reweighting by cross-modal coordination: each token's functional role (visual or textual) from its
attention shifts, and how well its attention allocation matches that role (DyCo [199]; rule of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`; experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.signals import declare_signal
from genalign.experimental.credit.model_internals import mean_one

declare_signal("modality_attention", ("N", "T", 3), "score",
               "The attention of the position predicting each action (mean over heads and layers): its share on the "
               "image tokens, and its Fisher-Rao shift from the previous action's within the image tokens and within "
               "the text tokens (detached; families with images).", source="[199] DyCo")  # fmt: skip


def role_alignment(readings: Tensor) -> tuple[Tensor, Tensor]:
    """``(visual, alignment)`` ``[N, T]`` from ``modality_attention`` ``[N, T, 3]``: a token is *visual* when its
    attention moved more within the image than within the text (it is extracting new visual evidence), else
    *textual*; its alignment is the attention share on the image for a visual token, on the text for a textual one."""
    share, image_shift, text_shift = readings.unbind(-1)
    visual = image_shift > text_shift
    return visual, torch.where(visual, share, 1.0 - share)


@CREDIT_RULES.register(
    "modality_alignment_weights",
    needs=("modality_attention",),
    formula="role_t = visual if FR-shift_image > FR-shift_text else textual; a_t = v_t (visual) or 1 − v_t (textual), "
    "v_t = attention share on the image; w_it = a_it / mean_t a_it; A_it ← A_it·((1 − β) + β·w_it)",
    source="[199] DyCo-RL (dynamic cross-modal coordination)",
    summary="Weight each token's advantage by how well its attention allocation (image vs text) matches the role "
    "its attention shifts assign it, rewarding reasoning that alternates between visual evidence and text.",
)
def modality_alignment_weights(advantages: Tensor, batch: StepBatch, *, mix: float = 0.5) -> Tensor:
    """DyCo-RL [199]: chains of thought fail when the model stops alternating between extracting visual evidence and
    synthesising textual context. The Fisher-Rao geodesic distance between consecutive tokens' within-modality
    attention distributions assigns each token a functional role (visual when its attention over the image moved
    more than its attention over the text), the alignment of its actual allocation with that role (its attention
    share on the image for a visual token, on the text for a textual one) scores its coordination, and the advantages
    are reweighted by that score.

    Reading chosen: alignments are normalised to mean 1 over each response (its total advantage is kept) and mixed
    with uniform weights by ``β``; attention is the mean over heads and layers of the position predicting the token
    (``modality_attention``, :mod:`genalign.policies.vlm.attention`).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask`` and ``modality_attention`` ``[N, T, 3]``.
        mix: ``β`` in ``[0, 1]`` (0: plain GRPO).
    Returns:
        ``[N, T]`` reweighted advantages (unchanged on padding).
    """
    if not 0 <= mix <= 1:
        raise ValueError(f"modality_alignment_weights: mix={mix!r} must be in [0, 1] (0: plain GRPO)")
    readings = batch.require("modality_attention", "credit rule 'modality_alignment_weights'").detach().double()
    valid = batch.mask.to(advantages.device) > 0
    _, alignment = role_alignment(readings.to(advantages.device))
    weights = mean_one(alignment.clamp_min(0.0), valid)  # [N, T]
    return advantages * ((1.0 - mix) + mix * weights).to(advantages.dtype)
