"""SAS [118] (Self-Aware Scheduling): a lightweight order policy choosing which masked positions to commit.

Registered as the decoding policy ``order_head`` (:data:`~genalign.policies.dlm.base.DECODING_POLICIES`).

At step ``s`` the denoiser has drawn a token for every masked position of the block; the order head scores each
candidate position ``j`` with a linear function of per-position features of the denoiser's prediction,
``u_j = w · f_j``, and commits ``k_s`` positions (LLaDA's count for the step) drawn one after another without
replacement from ``softmax(u)`` over the positions still masked (Plackett-Luce; at inference the ``k_s`` highest
scores). The log-probability of the step's ordered picks is exact (:func:`~genalign.policies.dlm.base.plackett_luce_logp`),
so the head is trained by GRPO with the denoiser frozen (``policy.freeze_denoiser: true``), one action per step
that had a choice.

The features ``f_j`` (``NUM_FEATURES`` = 4), computed from the denoiser's logits of the block (constants, no
gradient through the denoiser):

0. ``log p(y_j | x_s)``: log-probability of the drawn token (LLaDA's confidence);
1. ``−H_j``: negative entropy of the predicted distribution at ``j``;
2. ``log p(top-1) − log p(top-2)``: the margin between the two most likely tokens;
3. ``j / (Bk − 1)``: relative position in the block (0 for a block of one).

The heuristic orders are points of this family: a large confidence weight is low-confidence remasking, a large
negative position weight left to right; the head starts at ``w = (init_confidence_weight, 0, 0,
init_position_weight)``. Reading chosen: the abstract calls the order policy "lightweight" without naming its
inputs; a linear head over these features of the denoiser's output (rather than over its hidden states) works for
every architecture without hidden-state access and contains the heuristics, and the initial weights are this
library's choice. The dense self-aware reward (the pathwise log-likelihood of the tokens as they are committed,
recorded by the sampler as ``structure.path_logp``) is turned into per-step advantages by the credit rule
``self_aware_returns`` (:mod:`genalign.experimental.credit.self_aware`).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from genalign.policies.dlm.base import (
    DECODING_POLICIES,
    StepChoice,
    StepView,
    plackett_luce_logp,
    plackett_luce_sample,
)

NUM_FEATURES = 4


def position_features(logits: Tensor, token_logp: Tensor) -> Tensor:
    """``[B, Bk, 4]`` float32 features of each block position (module docstring) from the block's logits
    ``[B, Bk, V]`` (mask token at ``-inf``) and the drawn tokens' log-probabilities ``[B, Bk]``."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)  # [B, Bk, V]
    probs = log_probs.exp()
    entropy = -(probs * log_probs.nan_to_num(0.0, neginf=0.0)).sum(-1)  # [B, Bk]
    top2 = log_probs.topk(min(2, log_probs.shape[-1]), dim=-1).values  # [B, Bk, 2]
    margin = top2[..., 0] - top2[..., -1]  # [B, Bk]
    block = logits.shape[1]
    position = torch.arange(block, device=logits.device, dtype=torch.float32) / max(block - 1, 1)  # [Bk]
    return torch.stack([token_logp.float(), -entropy, margin, position.expand_as(margin)], dim=-1)  # [B, Bk, 4]


@DECODING_POLICIES.register(
    "order_head",
    formula="u_j = w · f_j(denoiser logits); commit k_s positions ~ Plackett-Luce(softmax u) over masked j; "
    "reward r_s = Σ_{j committed at s} log p_θ(x_j | x_s), denoiser frozen",
    source="[118] SAS (Self-Aware Scheduling)",
    summary="A linear order policy over per-position features of the frozen denoiser's prediction, trained with "
    "GRPO on the pathwise log-likelihood (self-aware reward).",
)
class OrderHead(nn.Module):
    """SAS [118] order policy (module docstring). Reading chosen: the features and the linear head of the module
    docstring.

    Args:
        block_length: ``Bk``; steps_per_block: ``S_b`` (the counts follow LLaDA's schedule).
        remasking: must be ``low_confidence`` (the order head replaces the remasking rule; the default keeps
            configs explicit).
        init_confidence_weight, init_position_weight: initial weights of features 0 and 3.
    """

    def __init__(
        self,
        block_length: int,
        steps_per_block: int,
        *,
        remasking: Literal["low_confidence"] = "low_confidence",
        init_confidence_weight: float = 1.0,
        init_position_weight: float = 0.0,
    ) -> None:
        super().__init__()
        if remasking != "low_confidence":
            raise ValueError(
                f"policy.remasking={remasking!r} cannot be used with decoding_policy 'order_head' (the head chooses "
                "the positions); set policy.remasking to 'low_confidence'."
            )
        self.block_length, self.steps_per_block = block_length, steps_per_block
        init = torch.tensor([init_confidence_weight, 0.0, 0.0, init_position_weight], dtype=torch.float32)
        #: ``[4]`` weights of the features (module docstring).
        self.order_weight = nn.Parameter(init)

    @torch.no_grad()
    def choose(self, view: StepView, *, greedy: bool, generator: torch.Generator | None) -> StepChoice:
        """Commit LLaDA's count of positions, drawn (or, ``greedy``, ranked) by the head's scores."""
        features = position_features(view.logits, view.token_logp)  # [B, Bk, 4]
        scores = features @ self.order_weight.detach().float()  # [B, Bk]
        remaining = view.candidates.sum(1)  # [B]
        count = torch.minimum(torch.full_like(remaining, view.scheduled), remaining)  # [B]
        picks = plackett_luce_sample(scores, view.candidates, count, greedy=greedy, generator=generator)  # [B, K]
        width = -(-self.block_length // self.steps_per_block)  # the largest count of the schedule
        padded = torch.full((picks.shape[0], width), -1, dtype=torch.long, device=picks.device)
        padded[:, : picks.shape[1]] = picks
        commit = torch.zeros_like(view.candidates)
        rows = torch.arange(picks.shape[0], device=picks.device)[:, None].expand_as(picks)
        commit[rows[picks >= 0], picks[picks >= 0]] = True
        return StepChoice(commit=commit, record={"features": features, "candidates": view.candidates, "picks": padded})

    def forward(self, records: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """``(logp [N, S], decision [N, S])``: the Plackett-Luce log-probability of each step's recorded picks (with
        grad in the weights); ``decision`` 1 where the step left some candidate masked (a step committing every
        remaining position had no choice and gets 0).

        Args:
            records: ``features`` ``[N, S, Bk, 4]``, ``candidates`` ``[N, S, Bk]`` bool, ``picks`` ``[N, S, K]``.
        """
        features, candidates, picks = records["features"], records["candidates"], records["picks"]
        scores = features.float() @ self.order_weight.float()  # [N, S, Bk]
        decision = candidates.sum(-1) > (picks >= 0).sum(-1)  # [N, S]
        logp = plackett_luce_logp(scores, candidates, picks)  # [N, S]
        return torch.where(decision, logp, 0.0), decision.float()


__all__ = ["NUM_FEATURES", "OrderHead", "position_features"]
