"""SKPO's skip-connected credit [66] on two-stage turn trees (a rule of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`): the upstream segment's tokens get its dense reward, the mean
outcome of the downstream completions sampled from it (the thought advantage of ``grpo_ma``), and each downstream
completion is credited relative to its siblings, the completions of the same upstream segment."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.experimental.credit.tree_groups import _cpu_tree, grpo_ma, labelled_stats, thought_of_leaves


@CREDIT_RULES.register(
    "skip_connected",
    needs=("prefix_tree",),
    replaces=True,
    formula="θ_i = the upstream node of leaf i (before its last split); V(θ) = mean_{j below θ} A_j; upstream tokens: "
    "A_θ = (V(θ) − mean_g V)/(std_g V + ε) over the group's upstreams; downstream tokens: "
    "A_i = (A_i − mean_{j∈sib(i)} A_j)/(std_{sib(i)} A + ε), sib(i) = the leaves of θ_i",
    source="[66] SKPO (upstream dense reward from downstream Monte-Carlo sampling; downstream group-relative among "
    "the completions of one upstream; the skip-connection prompt is the environment skip_connection)",
    summary="Two-stage credit: each upstream segment gets the mean outcome of its downstream completions (normalised "
    "over the prompt's upstreams), each downstream completion its advantage among its siblings.",
)
def skip_connected(advantages: Tensor, batch: StepBatch, *, eps: float = 1e-6) -> Tensor:
    """SKPO [66]: under practical budgets, Monte-Carlo advantages of early reasoning tokens are noisy and
    sign-inconsistent, so SKPO splits reasoning into an upstream and a downstream phase. The upstream segment gets a
    dense reward from downstream Monte-Carlo sampling: the mean reward of the downstream completions sampled from it;
    the downstream keeps group-relative optimisation among the completions of one upstream, each sampled from a new
    prompt made of the problem and the segment (the skip connection: ``skip_connection`` environment), which may
    bypass a flawed segment.

    Reading chosen: the rollouts are turn trees (turn 0 the upstream, split before turn 1 into ``M`` downstream
    turns; ``K`` upstreams per prompt). The upstream ("single-stream") dense reward is normalised over the prompt's
    ``K`` upstream segments, as ``grpo_ma`` does for a thought; the downstream group is a segment's ``M`` siblings,
    normalised by their standard deviation. Outcomes are the sample advantages (a per-group affine map of the
    rewards with positive slope: each normalisation gives the same values as on the rewards, up to ``ε``). A leaf that
    never split keeps its incoming advantage.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages (kept only on leaves that never split).
        batch: reads ``sample_advantages``, ``group_ids``, ``mask`` and ``prefix_tree``.
        eps: added to both standard deviations (a group whose values agree gets 0).
    Returns:
        ``[N, T]`` per-action advantages (0 on padding).
    """
    if not eps > 0:
        raise ValueError(f"skip_connected needs eps > 0, got {eps!r}")
    upstream = grpo_ma(advantages, batch, eps=eps)  # [N, T]: the upstream tokens' dense advantage, the rest incoming
    tree = _cpu_tree(batch, "skip_connected")
    thought, is_thought = thought_of_leaves(tree, batch.mask)  # [N], [N, T]
    outcome = batch["sample_advantages"].detach().float().cpu()  # [N]
    mean, std = labelled_stats(outcome, thought)  # [N] over each leaf's siblings (leaves of the same upstream)
    downstream = ((outcome - mean) / (std + eps)).to(advantages.device, advantages.dtype)  # [N]
    is_downstream = (batch.mask.cpu() > 0) & ~is_thought & (thought >= 0)[:, None]  # [N, T]
    result = torch.where(is_downstream.to(advantages.device), downstream[:, None], upstream)
    return torch.where(batch.mask > 0, result, 0.0)
