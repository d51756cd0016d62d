"""Loss aggregation: per-action losses ``[N, T]`` -> one scalar, invariant to micro-batching (formulas.md §3).

Every mode is split in two so that splitting an optimisation batch never changes the gradient:

1. :func:`loss_normalizer` returns *additive* statistics ``[S]`` (float64 counts) of one micro-batch. The trainer
   sums them over all micro-batches of the optimisation batch and all-reduces them (SUM) across processes.
2. :func:`aggregate` is called on each micro-batch with that GLOBAL normaliser; the sum over micro-batches (and
   processes) of its results equals the loss of the whole batch, so the accumulated gradient is the full-batch one.

Under DDP/FSDP the gradient all-reduce *averages* over ``W`` processes: multiply each micro-batch loss by ``W`` (or
reduce with SUM) so that the global normaliser is not applied twice.

"Sequences" are rows with at least one valid action: a row whose mask is all zero (e.g. a filtered sample) is not
counted by the sequence modes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from genalign.algorithms._validation import check_float_tensor, check_mask
from genalign.registry import Registry


@dataclass(frozen=True)
class Aggregation:
    """One aggregation mode.

    Attributes:
        statistics: names of the additive statistics returned by :func:`loss_normalizer`, in order.
        count: ``(mask [N, T] float, advantages [N] | None) -> [S]`` float64 statistics of a micro-batch.
        reduce: ``(masked_loss [N, T], mask [N, T], normalizer [S], advantages [N] | None, max_len) -> scalar``.
        needs_advantages: the mode splits sequences by the sign of their advantage.
        needs_max_len: the mode divides by a constant ``max_len``.
    """

    statistics: tuple[str, ...]
    count: Callable[[Tensor, Tensor | None], Tensor]
    reduce: Callable[[Tensor, Tensor, Tensor, Tensor | None, int | None], Tensor]
    needs_advantages: bool = False
    needs_max_len: bool = False

    @property
    def hyperparameters(self) -> dict[str, int | None]:
        """Keywords a config may pass to :func:`loss_normalizer` / :func:`aggregate` for this mode."""
        return {"max_len": None} if self.needs_max_len else {}


#: name -> :class:`Aggregation`
AGGREGATIONS: Registry[Aggregation] = Registry("aggregation mode")


def _safe_div(numerator: Tensor, denominator: Tensor) -> Tensor:
    """``numerator / denominator``, 0 where the denominator is 0 (no NaN in the graph)."""
    return torch.where(denominator > 0, numerator / torch.where(denominator > 0, denominator, 1.0), 0.0)


def _tokens(mask: Tensor) -> Tensor:
    return mask.to(torch.float64).sum()


def _sequences(mask: Tensor) -> Tensor:
    return (mask.sum(1) > 0).to(torch.float64).sum()


AGGREGATIONS.register(
    "token_mean",
    formula="Σ_{i,t} m·L / Σ_{i,t} m",
    source="formulas.md §3 (DAPO token-level loss)",
    summary="Every valid action of the batch weighs the same.",
)(
    Aggregation(
        statistics=("num_actions",),
        count=lambda mask, adv: _tokens(mask)[None],
        reduce=lambda loss, mask, norm, adv, max_len: _safe_div(loss.sum(), norm[0]),
    )
)


def _seq_mean_token_mean(loss: Tensor, mask: Tensor, norm: Tensor, adv: Tensor | None, max_len: int | None) -> Tensor:
    per_sequence = _safe_div(loss.sum(1), mask.sum(1))  # [N]
    return _safe_div(per_sequence.sum(), norm[0])


AGGREGATIONS.register(
    "seq_mean_token_mean",
    formula="mean_i ( Σ_t m·L / |o_i| )",
    source="formulas.md §3 (original GRPO; GSPO [293])",
    summary="Mean over sequences of each sequence's mean action loss.",
)(
    Aggregation(
        statistics=("num_sequences",), count=lambda mask, adv: _sequences(mask)[None], reduce=_seq_mean_token_mean
    )
)

AGGREGATIONS.register(
    "seq_mean_token_sum",
    formula="mean_i Σ_t m·L",
    source="formulas.md §3",
    summary="Mean over sequences of each sequence's summed action loss.",
)(
    Aggregation(
        statistics=("num_sequences",),
        count=lambda mask, adv: _sequences(mask)[None],
        reduce=lambda loss, mask, norm, adv, max_len: _safe_div(loss.sum(), norm[0]),
    )
)

AGGREGATIONS.register(
    "seq_mean_token_sum_norm",
    formula="Σ_{i,t} m·L / (N · T_max), T_max a constant (max_len)",
    source="[31] Dr. GRPO; formulas.md §3",
    summary="Sum of action losses divided by a constant, removing the length bias (Dr. GRPO).",
)(
    Aggregation(
        statistics=("num_sequences",),
        count=lambda mask, adv: _sequences(mask)[None],
        reduce=lambda loss, mask, norm, adv, max_len: _safe_div(loss.sum(), norm[0] * max_len),
        needs_max_len=True,
    )
)


def _balanced_count(mask: Tensor, adv: Tensor | None) -> Tensor:
    assert adv is not None
    positive, negative = adv > 0, adv < 0  # [N]
    present = mask.sum(1) > 0  # [N]
    tokens = mask.to(torch.float64).sum(1)  # [N]
    return torch.stack(
        [tokens[positive].sum(), tokens[negative].sum(), (present & positive).sum(), (present & negative).sum()]
    ).to(torch.float64)


def _balanced_reduce(loss: Tensor, mask: Tensor, norm: Tensor, adv: Tensor | None, max_len: int | None) -> Tensor:
    assert adv is not None
    positive, negative = (adv > 0)[:, None], (adv < 0)[:, None]  # [N, 1]
    tokens_pos, tokens_neg, seqs_pos, seqs_neg = norm.to(loss.dtype)
    mean_pos = _safe_div(torch.where(positive, loss, 0.0).sum(), tokens_pos)
    mean_neg = _safe_div(torch.where(negative, loss, 0.0).sum(), tokens_neg)
    seqs = seqs_pos + seqs_neg
    return _safe_div(seqs_pos * mean_pos + seqs_neg * mean_neg, seqs)


AGGREGATIONS.register(
    "balanced",
    formula="(n⁺·tokmean⁺(L) + n⁻·tokmean⁻(L)) / (n⁺ + n⁻); ± = sign of A_i, n = sequence counts",
    source="[259] BA",
    summary="Token mean inside the positive and the negative subsets, weighted by their sequence counts.",
)(
    Aggregation(
        statistics=("num_actions_positive", "num_actions_negative", "num_sequences_positive", "num_sequences_negative"),
        count=_balanced_count,
        reduce=_balanced_reduce,
        needs_advantages=True,
    )
)


def _check_inputs(
    mask: Tensor, mode: str, advantages: Tensor | None, max_len: int | None, shape: tuple[int, ...], dtype: torch.dtype
) -> tuple[Aggregation, Tensor, Tensor | None]:
    spec = AGGREGATIONS.get(mode)
    if len(shape) != 2:
        raise ValueError(f"mask must have shape [N, T], got {list(shape)}")
    mask = check_mask(mask, shape, dtype)
    if spec.needs_max_len and (max_len is None or max_len < 1):
        raise ValueError(
            f"aggregation {mode!r} divides by a constant max_len (the maximum number of actions, e.g. the "
            f"generation length limit); pass max_len >= 1, got {max_len!r}"
        )
    if spec.needs_advantages:
        if advantages is None:
            raise ValueError(f"aggregation {mode!r} splits sequences by advantage sign; pass advantages [N] or [N, T]")
        advantages = check_float_tensor(advantages, "advantages", "[N] or [N, T]")
        if tuple(advantages.shape) == shape:  # per-action (credit-weighted): the sign of the sequence's total
            advantages = torch.where(mask > 0, advantages.to(mask.dtype) * mask, 0.0).sum(1)  # [N]
        if tuple(advantages.shape) != (shape[0],):
            raise ValueError(
                f"aggregation {mode!r} needs the advantages of the sequences: shape [N]=[{shape[0]}] or "
                f"[N, T]={list(shape)}, got {list(advantages.shape)}"
            )
    return spec, mask, advantages


def loss_normalizer(
    mask: Tensor,
    mode: str,
    *,
    advantages: Tensor | None = None,
    max_len: int | None = None,
) -> Tensor:
    """Additive statistics ``[S]`` (float64) of one micro-batch for aggregation ``mode``.

    Sum the results over all micro-batches of an optimisation batch and all-reduce (SUM) across processes, then pass
    the total to :func:`aggregate` for every micro-batch. See ``Aggregation.statistics`` for what each entry counts.

    Args:
        mask: ``[N, T]`` bool or float, 1 where an action is trained.
        mode: a name in :data:`AGGREGATIONS`.
        advantages: ``[N]`` or ``[N, T]``, required by ``balanced`` (per-action advantages, e.g. credit-weighted,
            put a sequence in the subset of the sign of their masked sum; a sequence with sum 0 is in neither).
        max_len: constant ``T_max``, required by ``seq_mean_token_sum_norm``.
    """
    if not isinstance(mask, Tensor):
        raise ValueError(f"mask must be a torch.Tensor of shape [N, T], got {type(mask).__name__}")
    spec, mask, advantages = _check_inputs(mask, mode, advantages, max_len, tuple(mask.shape), torch.float64)
    return spec.count(mask, advantages)


def aggregate(
    loss: Tensor,
    mask: Tensor,
    mode: str,
    normalizer: Tensor,
    *,
    advantages: Tensor | None = None,
    max_len: int | None = None,
) -> Tensor:
    """Aggregate per-action losses of one micro-batch with the GLOBAL ``normalizer``.

    Summing the results over the micro-batches of a batch equals ``aggregate(full_loss, full_mask, mode,
    loss_normalizer(full_mask, mode))``.

    Args:
        loss: ``[N, T]`` per-action loss (policy loss plus any per-action KL/entropy terms); padding ignored.
        mask: ``[N, T]`` bool or float, 1 where an action is trained (float values act as weights).
        mode: a name in :data:`AGGREGATIONS`.
        normalizer: ``[S]`` summed :func:`loss_normalizer` statistics of the whole optimisation batch.
        advantages: ``[N]`` or ``[N, T]``, required by ``balanced`` (as in :func:`loss_normalizer`).
        max_len: constant ``T_max``, required by ``seq_mean_token_sum_norm``.
    Returns:
        scalar loss in ``loss.dtype``.
    """
    loss = check_float_tensor(loss, "loss", "[N, T]")
    spec, mask, advantages = _check_inputs(mask, mode, advantages, max_len, tuple(loss.shape), loss.dtype)
    normalizer = check_float_tensor(normalizer, "normalizer", f"[{len(spec.statistics)}]")
    if tuple(normalizer.shape) != (len(spec.statistics),):
        raise ValueError(
            f"normalizer for {mode!r} must have shape [{len(spec.statistics)}] ({', '.join(spec.statistics)}), "
            f"got {list(normalizer.shape)}; build it with loss_normalizer(mask, {mode!r})"
        )
    masked_loss = torch.where(mask > 0, loss * mask, 0.0)  # [N, T]
    return spec.reduce(masked_loss, mask, normalizer.to(loss.dtype), advantages, max_len)
