"""The full-distribution teacher pass: token divergences over the whole vocabulary, chunk by chunk.

A teacher's per-action log-prob compares the teacher and the student on the token the student sampled only. The
*distribution* signals compare their whole next-token distributions at every action, ``π_S(· | s_t)`` (the student:
the policy's current weights, which sampled the rollout, on the student's prompt) and ``π_T(· | s'_t)`` (the teacher,
on the prompt as the teacher sees it), both at the sampling temperature:

* ``teacher_vocab_reverse_kl`` ``[N, T]``: ``Σ_v π_S(v) (log π_S(v) − log π_T(v))`` (the exact per-token reverse
  KL whose one-sample estimate is ``−δ_t``; COPSD [107] minimises a full-distribution token divergence);
* ``teacher_vocab_forward_kl`` ``[N, T]``: ``Σ_v π_T(v) (log π_T(v) − log π_S(v))``.

Each model runs its backbone once per pass of ``batch_size`` samples (its ``hidden`` score feature: ``[b, T, H]``);
the output heads then run over the real action positions only, ``chunk_size`` tokens at a time, so at most one chunk's
``[chunk_size, V]`` logits per model exist: no ``[N, T, V]`` tensor is ever made.

**An anchor and logit extrapolation** (AlignDistil [85]): ``distribution.anchor`` names a second model ``A`` (the
policy's reference weights, or a model folder: the reverse-DPO model of [85]'s contrastive reward). With
``distribution.extrapolation`` ``β₂`` the teacher *is* the synthetic distribution of the scaled logits
``s* = s_T + w_t (s_T − s_A)``: its log-prob of each action replaces ``teacher_action_logp`` (and its entropy
``teacher_entropy``), both divergences compare the student with it, and ``teacher_extrapolation`` ``[N, T]`` is the
weight ``w_t``. ``adaptive: true`` (the token-adaptive logit extrapolation of [85]): ``w_t = β₂·TV_t + 10⁻³`` with
``TV_t = Σ_v |π_T(v) − π_A(v)|`` (the published code's sum, twice the usual total variation), so a token where the
DPO model and its anchor agree keeps the teacher's logits and one where they differ is extrapolated further;
``adaptive: false``: ``w_t = β₂``. Without an extrapolation, an anchor only adds ``teacher_anchor_logp`` (its log-prob
of each action, on the teacher's prompt; RTO [89] reads ``log π_dpo − log π_ref``).

The action log-probs under ``s*`` need no token ids: ``log π*(o) = (1 + w)(log π_T(o) + Z_T) − w (log π_A(o) + Z_A)
− Z*`` with ``Z = logsumexp`` of each model's scaled logits.

The heads are applied after each model's pass, outside the weights' context: an output head the policy trains
itself (``policy.lora.modules_to_save`` naming it) would then be the trained one for the reference as well.

Hosted by the families whose :class:`~genalign.policies.base.TeacherHost` applies an output head to hidden states
(``head_logits``; ``capabilities.teachers`` holds ``distribution``): the single-turn and multi-turn causal LM.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from genalign.teachers.distribution_options import ADAPTIVE_FLOOR, DistributionOptions

#: the signals only the full-distribution pass computes
VOCABULARY_SIGNALS = frozenset({"teacher_vocab_reverse_kl", "teacher_vocab_forward_kl", "teacher_extrapolation"})


@dataclass(frozen=True)
class ChunkComparison:
    """Per-token results of comparing the student with the (possibly extrapolated) teacher, ``[c]`` float32 each.

    Attributes:
        reverse_kl, forward_kl: the divergences (module docstring).
        target_logp: the teacher's log-prob of the sampled token (of ``s*`` when extrapolated).
        entropy: the teacher's entropy (of ``s*`` when extrapolated).
        weight: ``w_t`` (0 without an extrapolation).
    """

    reverse_kl: Tensor
    forward_kl: Tensor
    target_logp: Tensor
    entropy: Tensor
    weight: Tensor


def compare_chunk(
    student: Tensor,
    teacher: Tensor,
    teacher_logp: Tensor,
    anchor: Tensor | None = None,
    anchor_logp: Tensor | None = None,
    *,
    options: DistributionOptions | None = None,
) -> ChunkComparison:
    """Compare one chunk of scaled logits (module docstring).

    Args:
        student, teacher: ``[c, V]`` logits divided by the sampling temperature.
        teacher_logp: ``[c]`` the teacher's log-prob of each sampled token (from its scoring pass).
        anchor, anchor_logp: ``[c, V]`` and ``[c]`` likewise for the anchor (needed with an extrapolation).
        options: the extrapolation (None or ``extrapolation`` null: the teacher itself).
    """
    student_log = student.float().log_softmax(-1)  # [c, V]
    teacher_norm = torch.logsumexp(teacher.float(), -1)  # [c]
    target = teacher_log = None
    weight = torch.zeros_like(teacher_logp)
    if options is not None and options.extrapolates:
        assert anchor is not None and anchor_logp is not None, "an extrapolation needs the anchor's logits"
        anchor_norm = torch.logsumexp(anchor.float(), -1)  # [c]
        if options.adaptive:
            spread = (teacher.float() - teacher_norm[:, None]).exp() - (anchor.float() - anchor_norm[:, None]).exp()
            weight = options.extrapolation * spread.abs().sum(-1) + ADAPTIVE_FLOOR  # [c]
        else:
            weight = torch.full_like(teacher_logp, float(options.extrapolation))
        mixed = (1 + weight[:, None]) * teacher.float() - weight[:, None] * anchor.float()  # [c, V] s*
        mixed_norm = torch.logsumexp(mixed, -1)  # [c]
        teacher_log = mixed - mixed_norm[:, None]  # [c, V]
        target = (1 + weight) * (teacher_logp + teacher_norm) - weight * (anchor_logp + anchor_norm) - mixed_norm
    else:
        teacher_log = teacher.float() - teacher_norm[:, None]  # [c, V]
        target = teacher_logp.float()
    student_probs, teacher_probs = student_log.exp(), teacher_log.exp()  # [c, V]
    gap = student_log - teacher_log  # [c, V]
    return ChunkComparison(
        reverse_kl=(student_probs * gap).sum(-1),
        forward_kl=-(teacher_probs * gap).sum(-1),
        target_logp=target,
        entropy=-(teacher_probs * teacher_log).sum(-1),
        weight=weight,
    )


def compare_distributions(
    hidden: dict[str, Tensor],
    logp: dict[str, Tensor],
    mask: Tensor,
    heads: dict[str, object],
    *,
    chunk_size: int,
    options: DistributionOptions | None = None,
) -> dict[str, Tensor]:
    """The comparison of every real action of a pass, ``[b, T]`` float32 each, 0 on padding.

    Args:
        hidden: ``"student"``, ``"teacher"`` (and ``"anchor"``) ``[b, T, H]`` hidden states predicting each action.
        logp: ``"teacher"`` (and ``"anchor"``) ``[b, T]`` log-probs of the sampled actions.
        mask: ``[b, T]`` real actions.
        heads: the same keys: ``fn(hidden [c, H]) -> [c, V]`` scaled logits of that model.
        chunk_size: action positions per chunk of logits.
    Returns:
        ``reverse_kl``, ``forward_kl``, ``target_logp``, ``entropy``, ``weight``.
    """
    flat = torch.nonzero(mask.reshape(-1) > 0).flatten()  # [n] real actions
    rows = {name: value.reshape(-1, value.shape[-1])[flat] for name, value in hidden.items()}  # [n, H]
    logps = {name: value.reshape(-1)[flat].float() for name, value in logp.items()}  # [n]
    parts: list[ChunkComparison] = []
    with torch.no_grad():
        for start in range(0, flat.numel(), chunk_size):
            part = slice(start, start + chunk_size)
            logits = {name: heads[name](rows[name][part]) for name in rows}  # each [c, V]
            anchor = "anchor" in logits
            parts.append(compare_chunk(
                logits["student"], logits["teacher"], logps["teacher"][part],
                logits["anchor"] if anchor else None, logps["anchor"][part] if anchor else None, options=options,
            ))  # fmt: skip
    names = ("reverse_kl", "forward_kl", "target_logp", "entropy", "weight")
    out = {}
    for name in names:
        values = torch.cat([getattr(part, name) for part in parts]) if parts else mask.new_zeros(0).float()
        full = torch.zeros(mask.numel(), dtype=torch.float32, device=mask.device)
        out[name] = full.index_put((flat,), values.to(mask.device)).view(mask.shape)
    return out


__all__ = [
    "VOCABULARY_SIGNALS",
    "ChunkComparison",
    "compare_chunk",
    "compare_distributions",
]
