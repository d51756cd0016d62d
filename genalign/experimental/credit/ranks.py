"""Rank-level credit for generated lists: each rank of the list is a unit with its own causal reward and its own
group-relative advantage (rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`; experimental tier).

The rewards of the ranks come from the rollout signal ``prefix_rewards``: the trainer's reward of the completion cut
after each segment state (the causal-LM family decodes the prefix and scores it; no generation). For a ranking reward
such as DCG, the reward of the first ``k`` items is the DCG of those items, so differences of prefix rewards are the
gains of single ranks and ``R − R(first k items)`` is the gain of the ranks from ``k`` on.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.advantages.group_baselines import grpo
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.signals import declare_signal
from genalign.experimental.credit.segments import per_segment

declare_signal("prefix_rewards", ("N", "S+1"), "rollout",
               "The trainer's reward of the completion cut after each segment state (entry k: the first k segments; "
               "entry 0 the empty completion, entry S_i the sample's own output), measured at rollout time without "
               "generation (genalign.algorithms.structure: segment states); NaN past a sample's last state.",
               source="[104] Rank-GRPO", needs_rewards=True, pad="nan")  # fmt: skip


def rank_rewards(prefix: Tensor, kind: Literal["to_go", "own"]) -> Tensor:
    """``[N, S]`` the causal reward of each rank (segment) ``k < S_i`` from ``prefix`` ``[N, S + 1]`` (NaN after a
    sample's last state); NaN for the ranks a sample does not have.

    ``to_go``: ``R_i − R_i(s_k)``, the reward the ranks from ``k`` on add (Rank-GRPO's log-decay reward: DCG from rank
    ``k``, with no credit for the earlier ranks); ``own``: ``R_i(s_{k+1}) − R_i(s_k)``, the rank's own gain.
    """
    prefix = prefix.double()
    present = ~prefix.isnan()  # [N, S + 1]
    last = (present.long().sum(1) - 1).clamp_min(0)  # [N] index of each sample's final state S_i
    final = prefix.gather(1, last[:, None])  # [N, 1] the sample's own reward
    if kind == "to_go":
        rewards = final - prefix[:, :-1]  # [N, S]
    else:
        rewards = prefix[:, 1:] - prefix[:, :-1]  # [N, S]
    ranks = torch.arange(prefix.shape[1] - 1, device=prefix.device)[None]  # [1, S]
    return torch.where(ranks < last[:, None], rewards, torch.nan)  # [N, S]


@CREDIT_RULES.register(
    "rank_causal",
    needs=("segment_ids", "prefix_rewards"),
    replaces=True,
    formula="R_i(s_k) = reward of the first k segments (ranks); r_ik = R_i − R_i(s_k) (to_go) or R_i(s_{k+1}) − "
    "R_i(s_k) (own); A_ik = (r_ik − mean_G r_·k)/(std_G r_·k + ε) over the group's samples that have rank k; "
    "action t of rank k gets A_ik",
    source="[104] Rank-GRPO (pair with ratio_level: sentence for the rank-level geometric-mean ratio)",
    summary="Rank-level credit for generated lists: each rank gets the reward of itself and the ranks after it, "
    "normalised against the same rank of the group's other samples.",
)
def rank_causal(
    advantages: Tensor,
    batch: StepBatch,
    *,
    reward: Literal["to_go", "own"] = "to_go",
    eps: float = 1e-6,
) -> Tensor:
    """Rank-GRPO [104]: the unit of optimisation is a rank of the generated list, not a token (too fine) or the
    sequence (too coarse). A sequence-level list reward such as DCG credits every item, also the early ones, for the
    hits of later ranks (non-causal credit); here rank ``k`` is rewarded with the gain of ranks ``k, k + 1, ...``
    only (``reward="to_go"``, the published log-decay reward; ``"own"``: its own gain only, the published ``exp_∞``
    variant), and the rewards of each rank are normalised within the group like GRPO (samples lacking the rank are
    left out). Rank-GRPO's rank-level importance ratio (the geometric mean of a rank's token ratios) is the
    ``sentence`` ratio level over the same segments.

    Reading chosen: a rank is a segment of the rollout's ``segment_ids`` (the family's segments: one per line of a
    list written one item per line; an item the segmenter splits in two, e.g. after ``"1."``, gives two segments of
    which the first adds no reward), and a rank's reward is read from the trainer's reward of list prefixes
    (``prefix_rewards``), so any list reward, evaluated on a truncated list, defines the rank gains.

    Args:
        advantages: ``[N, T]`` incoming advantages (replaced).
        batch: reads ``segment_ids`` ``[N, T]``, ``prefix_rewards`` ``[N, S + 1]``, ``group_ids`` and ``mask``.
        reward: ``"to_go"`` or ``"own"``.
        eps: added to the group std of each rank's rewards.
    Returns:
        ``[N, T]`` per-action advantages (0 on padding and for ranks no other group member has).
    """
    if reward not in ("to_go", "own"):
        raise ValueError(f"rank_causal: reward must be 'to_go' or 'own', got {reward!r}")
    if not eps >= 0:
        raise ValueError(f"rank_causal: eps must be >= 0, got {eps!r}")
    prefix = batch.require("prefix_rewards", "credit rule 'rank_causal'").detach().cpu()  # [N, S + 1]
    per_rank = rank_rewards(prefix, reward)  # [N, S]
    if per_rank.shape[1] == 0:
        return torch.zeros_like(advantages)
    normalised = grpo(per_rank, batch.group_ids.cpu(), eps=eps).nan_to_num(0.0)  # [N, S]
    segments = batch.require("segment_ids", "credit rule 'rank_causal'").long().cpu()
    result = per_segment(normalised, segments).to(advantages.device)  # [N, T]
    return torch.where(batch.mask.to(advantages.device) > 0, result, 0.0).to(advantages.dtype)
