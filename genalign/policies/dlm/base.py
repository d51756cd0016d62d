"""Trainable decoding policies of masked diffusion LMs: what they see at a step, what they return, their registry.

A masked diffusion LM decodes an answer in ``S`` steps (semi-autoregressive blocks of ``Bk`` positions, ``S_b``
steps per block, :mod:`genalign.schedulers.masked_diffusion`). At every step the denoiser draws a token for each
masked position; a *decoding policy* then decides which of the still-masked positions of the block are committed.
The heuristic samplers fix that decision (LLaDA's count schedule and its low-confidence order); the options of
:data:`DECODING_POLICIES` learn it:

* ``count_schedule`` (Co-GRPO [179], :mod:`genalign.experimental.decoding.schedule`): how MANY tokens to commit per step;
* ``order_head`` (SAS [118], :mod:`genalign.experimental.decoding.order`): WHICH positions to commit.

One signature for every option (an ``nn.Module``)::

    choose(view: StepView, *, greedy: bool, generator) -> StepChoice   # at rollout, without grad
    forward(records: dict[str, Tensor [N, S, ...]]) -> (logp [N, S], decision [N, S])  # scoring, with grad

``choose`` records, per sample, everything its log-probability needs (``StepChoice.record``); the policy stacks
the records of the ``S`` steps to ``[N, S, ...]`` and stores them in the rollout. ``forward`` re-computes the
log-probability of every recorded decision from the records alone, so the rollout's old log-probs and the scoring
pass are one code path (exact ratio 1 before an update). ``decision[n, s]`` is 1 where step ``s`` offered a choice
(a forced step, e.g. the last step of a block that must commit what is left, has log-probability 0 and is not an
action). The denoiser's outputs enter the records as constants: no gradient flows through generation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from genalign.registry import Registry
from genalign.schedulers.masked_diffusion import gumbel_max_sample


@dataclass(frozen=True)
class StepView:
    """What a decoding policy sees at one step, restricted to the current block of ``Bk`` positions.

    Attributes:
        token_logp: ``[B, Bk]`` float32 ``log p(drawn_j | x_s)`` of each drawn token under the denoiser (temperature
            1, mask token excluded), the confidence of LLaDA's low-confidence remasking.
        logits: ``[B, Bk, V]`` float32 denoiser logits of the block (mask token at ``-inf``).
        candidates: ``[B, Bk]`` bool, the positions of the block still masked.
        step_in_block: ``s_b`` in ``0 .. S_b - 1``.
        steps_per_block: ``S_b``.
        scheduled: LLaDA's count for this step (``tokens_per_step(Bk, S_b)[s_b]``).
    """

    token_logp: Tensor
    logits: Tensor
    candidates: Tensor
    step_in_block: int
    steps_per_block: int
    scheduled: int


@dataclass(frozen=True)
class StepChoice:
    """A decoding policy's decision at one step.

    Attributes:
        commit: ``[B, Bk]`` bool, the positions committed now (a subset of the candidates, at least one per row that
            has a candidate).
        record: ``{key: [B, ...] tensor}`` what :meth:`DecodingPolicy.forward` needs to re-score the decision.
    """

    commit: Tensor
    record: dict[str, Tensor]


class DecodingPolicy(Protocol):
    """The signature of every option of :data:`DECODING_POLICIES` (module docstring); an ``nn.Module``."""

    def choose(self, view: StepView, *, greedy: bool, generator: torch.Generator | None) -> StepChoice: ...

    def __call__(self, records: dict[str, Tensor]) -> tuple[Tensor, Tensor]: ...


#: name -> ``cls(block_length, steps_per_block, *, remasking, **hp)`` building a :class:`DecodingPolicy`.
DECODING_POLICIES: Registry[type] = Registry("decoding policy", catalogue="genalign.experimental.decoding")


def masked_categorical_sample(logits: Tensor, *, greedy: bool, generator: torch.Generator | None) -> Tensor:
    """One index per row of ``logits`` ``[B, C]`` (``-inf`` = excluded): the argmax when ``greedy``, else a draw
    from ``softmax(logits)`` by the Gumbel-max trick of the sampler (one code path for every categorical here)."""
    return gumbel_max_sample(logits.unsqueeze(1), 0.0 if greedy else 1.0, generator).squeeze(1)  # [B]


def plackett_luce_sample(
    scores: Tensor, available: Tensor, counts: Tensor, *, greedy: bool, generator: torch.Generator | None
) -> Tensor:
    """Ordered picks without replacement: ``counts[b]`` positions of row ``b`` drawn one after another from
    ``softmax(scores)`` over the positions still available (Plackett-Luce; ``greedy``: the highest scores in order).

    Args:
        scores: ``[B, C]`` float; available: ``[B, C]`` bool; counts: ``[B]`` long, ``<= available.sum(1)``.

    Returns:
        ``[B, K]`` long picks in draw order, ``K = max(counts)``, ``-1`` past a row's count.
    """
    picks = torch.full((scores.shape[0], int(counts.max().clamp_min(0))), -1, dtype=torch.long, device=scores.device)
    left = available.clone()
    for m in range(picks.shape[1]):
        active = counts > m  # [B]
        masked = scores.float().masked_fill(~left, -torch.inf)  # [B, C]
        masked = torch.where(active[:, None], masked, torch.zeros_like(masked))  # finished rows: any finite row
        pick = masked_categorical_sample(masked, greedy=greedy, generator=generator)  # [B]
        picks[:, m] = torch.where(active, pick, -1)
        left[active, pick[active]] = False
    return picks


def plackett_luce_logp(scores: Tensor, available: Tensor, picks: Tensor) -> Tensor:
    """``Σ_m [u_{π_m} − logsumexp_{j available before pick m} u_j]``, the log-probability of ordered picks.

    Args:
        scores: ``[..., C]`` float (with grad); available: ``[..., C]`` bool before the first pick;
        picks: ``[..., K]`` long in draw order, ``-1`` = no pick.

    Returns:
        ``[...]`` float32 log-probability (0 where nothing was picked).
    """
    left = available.clone()
    total = scores.new_zeros(scores.shape[:-1], dtype=torch.float32)
    for m in range(picks.shape[-1]):
        pick = picks[..., m]  # [...]
        valid = pick >= 0
        index = pick.clamp_min(0).unsqueeze(-1)  # [..., 1]
        masked = scores.float().masked_fill(~left, -torch.inf)  # [..., C]
        masked = torch.where(valid[..., None], masked, 0.0)  # rows without a pick stay finite (no NaN gradient)
        normaliser = torch.logsumexp(masked, dim=-1)  # [...]
        chosen = scores.float().gather(-1, index).squeeze(-1)  # [...]
        total = total + torch.where(valid, chosen - normaliser, 0.0)
        left = left & ~(torch.nn.functional.one_hot(pick.clamp_min(0), scores.shape[-1]).bool() & valid[..., None])
    return total


__all__ = [
    "DECODING_POLICIES",
    "DecodingPolicy",
    "StepChoice",
    "StepView",
    "masked_categorical_sample",
    "plackett_luce_logp",
    "plackett_luce_sample",
]
