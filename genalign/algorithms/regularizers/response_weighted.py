"""Response-weighted KL regularisation (REVA-PO's RER [18]): the KL to the reference weighted per response by the
sign of its advantage and its reference-policy entropy, and the score feature it reads, ``ref_entropy``."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import make_groups
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.objectives.group_terms import sample_advantages, sequence_mean
from genalign.algorithms.regularizers.base import REGULARIZERS, valid_mask
from genalign.algorithms.scores import ScoreOutput
from genalign.algorithms.signals import declare_signal

declare_signal("ref_entropy", ("N", "T"), "score",
               "Per-action entropy of the reference policy (the KL's reference), from its own scoring pass.",
               source="[18]")  # fmt: skip

#: added to the group's entropy range before dividing (as the published code)
RANGE_EPS = 1e-6


def normalized_group_entropy(ref_entropy: Tensor, mask: Tensor, group_ids: Tensor) -> Tensor:
    """``[N]`` each response's mean reference entropy, min-max normalised within its group to ``[0, 1]``:
    ``x_i = (H_i − min_G H) / (max_G H − min_G H + 1e-6)`` (``ref_entropy`` ``[N, T]``, ``mask`` ``[N, T]``,
    ``group_ids`` ``[N]``)."""
    entropy = sequence_mean(ref_entropy.detach(), mask)  # [N] H_i
    groups = make_groups(group_ids, entropy.shape[0], min_size=1)
    fill = torch.full((groups.num_groups,), torch.inf, dtype=entropy.dtype, device=entropy.device)
    low = fill.scatter_reduce(0, groups.index, entropy, reduce="amin")  # [G]
    high = (-fill).scatter_reduce(0, groups.index, entropy, reduce="amax")  # [G]
    return (entropy - low[groups.index]) / (high - low + RANGE_EPS)[groups.index]  # [N]


@REGULARIZERS.register(
    "response_weighted_kl",
    needs=("kl", "ref_entropy"),
    whole_groups=True,
    formula="L_it = β_i·KL_it; x_i = group min-max of the response's mean reference entropy; A_i > 0: "
    "β_i = β_min + (β_base − β_min)(1 − x_i); A_i < 0: β_i = β_base + (β_max − β_base)·x_i; A_i = 0: β_base",
    source="[18] REVA-PO, Response-Weighted Regularization (published code: report_generation.py, b_min/b_base/b_max)",
    summary="Per-response KL weight: looser for responses better than their group (the more so the more certain the "
    "reference was), tighter for worse ones (the more so the less certain it was).",
)
def response_weighted_kl(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    beta_min: float = 0.05,
    beta_base: float = 0.10,
    beta_max: float = 0.12,
) -> Tensor:
    """REVA-PO's Response-Weighted Regularization [18]: a fixed KL coefficient keeps pulling good and bad responses
    alike towards the reference; RER sets each response's coefficient from the sign of its advantage and its
    reference-policy entropy, relaxing the constraint on high-quality responses and tightening it on low-quality ones.

    The response's mean reference entropy is min-max normalised within its group (:func:`normalized_group_entropy`,
    ``x ∈ [0, 1]``). A response with ``A > 0`` gets ``β = β_min + (β_base − β_min)(1 − x)`` (loosest where the
    reference was most uncertain), one with ``A < 0`` gets ``β = β_base + (β_max − β_base)·x``, one with ``A = 0``
    ``β_base``; the per-action KL (the score feature ``kl`` with ``algorithm.kl_estimator``, ``k3`` as published) is
    multiplied by ``β``. Use it in place of the plain KL term (``kl_coef = 0``; ``regularizer_coef = 1``); the
    defaults are the published ``b_min``, ``b_base``, ``b_max``. Every micro-batch must hold whole groups.

    Where genalign differs from the published code: the KL is not clamped to ``[−10, 10]``, and the sign of the
    advantage is that of the sample's mean advantage over its actions when credit rules made it per action.

    Args:
        score, advantages, batch: read ``kl`` (grad), ``ref_entropy``, ``mask``, ``group_ids`` and the advantages.
        beta_min, beta_base, beta_max: ``0 <= β_min <= β_base <= β_max``.
    Returns:
        ``[N, T]`` the weighted KL (0 on padding; grad through ``kl``).
    """
    if not 0 <= beta_min <= beta_base <= beta_max:
        raise ValueError(f"need 0 <= beta_min <= beta_base <= beta_max, got {beta_min!r}, {beta_base!r}, {beta_max!r}")
    mask = valid_mask(score, batch)
    kl = score.require("kl", "response_weighted_kl")
    x = normalized_group_entropy(score.require("ref_entropy", "response_weighted_kl"), mask, batch.group_ids)  # [N]
    adv = sample_advantages(advantages, mask)  # [N]
    positive = beta_min + (beta_base - beta_min) * (1.0 - x)  # [N]
    negative = beta_base + (beta_max - beta_base) * x  # [N]
    beta = torch.where(adv > 0, positive, torch.where(adv < 0, negative, torch.full_like(x, beta_base)))  # [N]
    return torch.where(mask > 0, beta[:, None].to(kl.dtype) * kl, 0.0)  # [N, T]
