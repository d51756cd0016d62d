"""Random token subsets with Horvitz–Thompson reweighting: NAT [220] (a rule of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.experimental.credit.prefix import valid_positions


def prefix_inclusion(position: Tensor, length: Tensor, min_fraction: float) -> tuple[Tensor, Tensor]:
    """Random Prefix Cutting: ``(low [N, 1], inclusion [N, T])``. Each row keeps its first ``K`` valid actions with
    ``K`` uniform on ``{low, …, L}``, ``low = max(1, ⌈min_fraction·L⌉)``, so action ``t`` is kept with probability
    ``π_t = 1`` for ``t <= low`` and ``(L − t + 1)/(L − low + 1)`` after it."""
    low = torch.ceil(min_fraction * length.double() - 1e-9).long().clamp(min=1)  # [N, 1]
    low = torch.minimum(low, length.clamp_min(1))
    choices = (length - low + 1).clamp_min(1)  # [N, 1]
    inclusion = torch.where(position <= low, 1.0, (length - position + 1).clamp_min(0) / choices)  # [N, T]
    return low, inclusion.double()


@CREDIT_RULES.register(
    "token_subsample",
    needs=(),
    formula="keep_it ~ Bernoulli(π_it); A_it ← A_it·keep_it/π_it; URS: π = q; RPC: keep the first K ~ U{low..L} "
    "actions, π_t = P(K >= t)",
    source="[220] NAT (URS, RPC; the RPC cut distribution is inferred); the compute saving needs "
    "algorithm.score_only_trained",
    summary="Train on a random subset of tokens, reweighted by the inverse inclusion probability so the "
    "policy gradient stays unbiased.",
)
def token_subsample(
    advantages: Tensor,
    batch: StepBatch,
    *,
    scheme: Literal["uniform", "prefix"] = "uniform",
    keep_fraction: float = 0.5,
    min_fraction: float = 0.0,
) -> Tensor:
    """Not All Tokens Are Needed [220]: the update uses a random subset of the generated tokens, and each kept token's
    advantage is divided by its inclusion probability (Horvitz–Thompson), so the expected gradient equals the
    full-token one. ``uniform`` (URS) keeps each valid action independently with probability ``q``; ``prefix`` (RPC)
    keeps a random prefix of each response, ``K`` uniform on ``{low, …, L}`` valid actions.

    The dropped actions stay in the aggregation's denominators, as the estimator requires (the sum over all tokens is
    what is estimated). The rule itself only zeroes advantages; with ``algorithm.score_only_trained: true`` the
    update's scoring pass skips the dropped tokens (:mod:`genalign.trainer.trained_scoring`): a causal LM runs its
    backbone only up to each micro-batch's last kept token (RPC's saving: the cut tail never runs forward or backward)
    and its output head only on the kept tokens (URS keeps the backbone pass: a dropped token before a kept one is
    still context). Draws use torch's global generator (saved in checkpoints).

    Reading chosen: the abstract names the two selectors but not their distributions; URS keeps each token with
    probability ``q`` (default 50 %, the budget at which NAT reports parity), RPC draws the kept prefix length uniformly
    between ``⌈min_fraction·L⌉`` (at least 1) and ``L``, which keeps about half of the tokens with ``min_fraction = 0``.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask``.
        scheme: ``uniform`` (URS) or ``prefix`` (RPC).
        keep_fraction: ``q`` in ``(0, 1]`` (``uniform``; NAT reports parity with full-token GRPO at 50 %).
        min_fraction: the shortest prefix kept, as a fraction of the response, in ``[0, 1]`` (``prefix``).
    Returns:
        ``[N, T]`` ``advantages · keep / π`` (0 on dropped actions and padding).
    """
    if scheme not in ("uniform", "prefix"):
        raise ValueError(f"scheme must be 'uniform' or 'prefix', got {scheme!r}")
    if not 0 < keep_fraction <= 1 or not 0 <= min_fraction <= 1:
        raise ValueError(f"need 0 < keep_fraction <= 1 and 0 <= min_fraction <= 1, got {keep_fraction!r}, "
                         f"{min_fraction!r}")  # fmt: skip
    valid = batch.mask > 0  # [N, T]
    if scheme == "uniform":
        inclusion = torch.full(valid.shape, keep_fraction, dtype=torch.float64)
        keep = torch.rand(valid.shape, dtype=torch.float64) < inclusion  # [N, T]
    else:
        position, length = valid_positions(batch.mask.cpu())  # [N, T], [N, 1]
        low, inclusion = prefix_inclusion(position, length, min_fraction)
        cut = low + (torch.rand(length.shape, dtype=torch.float64) * (length - low + 1).clamp_min(1)).long()  # [N, 1]
        keep = position <= cut  # [N, T]
    keep = keep.to(valid.device) & valid
    weights = torch.where(keep, 1.0 / inclusion.to(valid.device), 0.0)  # [N, T]
    return advantages * weights.to(advantages.dtype)
