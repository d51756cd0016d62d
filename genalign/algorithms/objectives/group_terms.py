"""Shared pieces of the group-level objectives (ConSPO, DisCO, GVPO, Reg-GRPO, the preference objectives): sequence
scores, group sums and log-sum-exps, the rule that places a per-sample loss on the actions of its sample, and the one
that places a micro-batch token mean (a KL constraint) on the actions.

Placement rule. A group-level objective produces one loss value ``ℓ_i`` per sample; it is written on every valid action
of sample ``i`` (0 on padding). With ``aggregation: seq_mean_token_mean`` the aggregated loss is then exactly
``mean_i ℓ_i`` over the optimisation batch, whatever the micro-batch split (the normaliser counts sequences); other
aggregation modes weigh samples by their length (``token_mean``: ``Σ_i |o_i| ℓ_i / Σ_i |o_i|``). The objectives that use
this rule therefore declare ``aggregation="seq_mean_token_mean"`` in their registry meta: it is the default of
``algorithm.aggregation`` with them, and another mode is refused at config load. ``n`` samples, ``T`` actions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import Groups, make_groups
from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.scores import ScoreOutput


def batch_inputs(score: ScoreOutput, batch: StepBatch, option: str) -> tuple[Tensor, Tensor, Groups]:
    """``(logp [n, T] float32 with grad, mask [n, T], groups)`` of a micro-batch (each group needs >= 1 member)."""
    mask = require(batch, "mask", f"objective {option!r}")
    group_ids = require(batch, "group_ids", f"objective {option!r}")
    logp = score.logp.float()
    return logp, mask.to(logp.dtype), make_groups(group_ids, logp.shape[0], min_size=1)


def sequence_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Masked mean over the action axis ``[n, T] -> [n]`` (0 for a sample without actions); padding may hold
    anything (even ``-inf``)."""
    valid = mask > 0
    return torch.where(valid, values, 0.0).sum(1) / mask.sum(1).clamp_min(1.0)  # [n]


def sample_advantages(advantages: Tensor, mask: Tensor) -> Tensor:
    """One advantage per sample ``[n]``: ``advantages`` ``[n]`` as is, ``[n, T]`` (after credit) averaged over valid
    actions."""
    advantages = advantages.detach().to(mask.dtype)
    return advantages if advantages.ndim == 1 else sequence_mean(advantages, mask)


def group_sum(values: Tensor, groups: Groups) -> Tensor:
    """``[n] -> [G]`` (differentiable)."""
    return values.new_zeros(groups.num_groups).index_add(0, groups.index, values)


def group_count(include: Tensor, groups: Groups) -> Tensor:
    """Members of each group with ``include`` ``[n]`` bool -> ``[G]`` float."""
    return group_sum(include.float(), groups)


def group_logsumexp(values: Tensor, include: Tensor, groups: Groups) -> Tensor:
    """``log Σ_{j ∈ group, include_j} exp(values_j)`` ``[G]`` (``-inf`` for a group with no included member);
    differentiable in ``values`` (the stabilising shift is a constant)."""
    masked = torch.where(include, values, -torch.inf)  # [n]
    shift = torch.full((groups.num_groups,), -torch.inf, dtype=values.dtype, device=values.device)
    shift = shift.scatter_reduce(0, groups.index, masked.detach(), reduce="amax")  # [G]
    finite_shift = torch.where(torch.isfinite(shift), shift, 0.0)  # [G]
    exp = torch.where(include, torch.exp(values - finite_shift[groups.index]), 0.0)  # [n]
    total = group_sum(exp, groups)  # [G]
    return torch.where(total > 0, torch.log(total.clamp_min(torch.finfo(values.dtype).tiny)) + finite_shift, -torch.inf)


def on_actions(per_sample: Tensor, mask: Tensor) -> Tensor:
    """Write ``per_sample`` ``[n]`` on every valid action of its sample: ``[n, T]``, 0 on padding."""
    return torch.where(mask > 0, per_sample[:, None].expand_as(mask), 0.0)  # [n, T]


def batch_token_mean_on_actions(per_action: Tensor, mask: Tensor) -> Tensor:
    """Write ``per_action`` ``[n, T]`` as ``v_it · n|o_i| / Σ_j |o_j|`` (0 on padding), so that ``seq_mean_token_mean``
    aggregation of the result gives the token mean ``Σ_it m v / Σ m`` of the micro-batch (for a constraint such as a
    KL to the old policy, written beside a per-sample loss)."""
    lengths = mask.sum(1, keepdim=True)  # [n, 1]
    scale = lengths * mask.shape[0] / lengths.sum().clamp_min(1.0)  # [n, 1]
    return torch.where(mask > 0, per_action * scale, 0.0)  # [n, T]
