"""Video-KTR [230]: selective token-level RL on key tokens chosen by three attribution signals (rule of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`).

The signals come from the scoring pass before the update of a family with images (a video is a row with one image
per frame, :mod:`genalign.policies.vlm.perception`): ``logp_without_image`` (the visual input masked),
``logp_frames_shuffled`` (the frames reordered) and ``entropy``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.credit.vision import top_fraction_per_row, visual_dependency_scores
from genalign.algorithms.signals import declare_signal

declare_signal("logp_frames_shuffled", ("N", "T"), "score",
               "Log-probabilities of the stored actions from a second pass with each sample's frames (images) in "
               "another order (same tokens and positions), at the sampling temperature (detached).",
               source="[230] Video-KTR")  # fmt: skip


def key_token_mask(signals: list[tuple[Tensor, float]], valid: Tensor) -> Tensor:
    """``[N, T]`` bool union over ``(score [N, T], fraction)`` pairs of each row's ``⌈fraction·|o_i|⌉`` highest
    positive scores (a signal with fraction 0 selects nothing; a token with score 0 carries no signal)."""
    keep = torch.zeros_like(valid)
    for score, fraction in signals:
        if fraction > 0:
            keep |= top_fraction_per_row(score, valid, fraction) & (score > 0)
    return keep


@CREDIT_RULES.register(
    "video_key_tokens",
    needs=("logp_without_image", "logp_frames_shuffled", "entropy", "behaviour_logp"),
    formula="v_it = k3(δ_vis), δ_vis = logπ(o_it|visual masked) − logπ(o_it); τ_it = k3(δ_tmp), δ_tmp = "
    "logπ(o_it|frames shuffled) − logπ(o_it); key = top⌈ρ_v|o_i|⌉(v) ∪ top⌈ρ_t|o_i|⌉(τ) ∪ top⌈ρ_h|o_i|⌉(H); "
    "A_it ← A_it·1[key_it]",
    source="[230] Video-KTR",
    summary="Reinforce only key tokens: the union of the most visually dependent, most temporally sensitive and "
    "highest-entropy tokens of each sequence.",
)
def video_key_tokens(
    advantages: Tensor,
    batch: StepBatch,
    *,
    visual_fraction: float = 0.2,
    temporal_fraction: float = 0.2,
    entropy_fraction: float = 0.2,
    max_dependency: float = 10.0,
) -> Tensor:
    """Video-KTR [230] modality-aware key-token selection.

    Per token of sequence ``i``: the visual signal ``v_it`` and the temporal signal ``τ_it`` are the ``k3``
    estimate of the KL between the policy with the original input and with the counterfactual one, at the sampled
    token (:func:`~genalign.algorithms.credit.vision.visual_dependency_scores`: ``exp(δ) − δ − 1``, capped at
    ``max_dependency``), with ``δ`` the log-prob change when the visual input is masked (``logp_without_image``)
    or the frames are shuffled (``logp_frames_shuffled``); the third signal is the token entropy ``H_it``. The key
    tokens are the union of each signal's top ``⌈ρ·|o_i|⌉`` tokens (positive scores only); the others get advantage
    0 but stay in the aggregation's denominators (the update is masked, as VPPO does).

    Reading chosen: the abstract gives the three signals and "reinforcing only these key tokens"; the per-sequence
    top fraction with a union, the ``k3`` form of the log-prob change (shared with VPPO [329]) and the fractions
    ``ρ_v = ρ_t = ρ_h = 0.2`` are this library's choices (set a fraction to 0 to drop a signal, as the paper's
    ablations do).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask``, ``behaviour_logp``, ``logp_without_image``, ``logp_frames_shuffled`` and ``entropy``
            ``[N, T]``.
    Returns:
        ``[N, T]`` ``advantages · 1[key token]``.
    """
    fractions = {"visual_fraction": visual_fraction, "temporal_fraction": temporal_fraction}
    fractions["entropy_fraction"] = entropy_fraction
    for name, value in fractions.items():
        if not 0 <= value <= 1:
            raise ValueError(f"video_key_tokens: {name}={value!r} must be in [0, 1] (0 drops the signal; e.g. 0.2).")
    if not any(fractions.values()):
        raise ValueError("video_key_tokens: every fraction is 0, so no token would be trained; set one of them > 0.")
    if max_dependency <= 0:
        raise ValueError(f"video_key_tokens: max_dependency={max_dependency!r} must be > 0 (e.g. 10.0).")
    device = advantages.device
    valid = batch.mask.to(device) > 0  # [N, T]
    logp = batch.require("behaviour_logp", "video_key_tokens").detach().to(device)  # [N, T]
    without_image = batch.require("logp_without_image", "video_key_tokens").detach().to(device)  # [N, T]
    shuffled = batch.require("logp_frames_shuffled", "video_key_tokens").detach().to(device)  # [N, T]
    entropy = batch.require("entropy", "video_key_tokens").detach().float().to(device)  # [N, T]
    visual = visual_dependency_scores(logp, without_image, valid, cap=max_dependency)  # [N, T]
    temporal = visual_dependency_scores(logp, shuffled, valid, cap=max_dependency)  # [N, T]
    signals = [(visual, visual_fraction), (temporal, temporal_fraction), (entropy, entropy_fraction)]
    keep = key_token_mask(signals, valid)  # [N, T]
    return advantages * keep.to(advantages.dtype)
