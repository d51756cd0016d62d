"""Group advantages on the trees of shared-prefix rollouts: Tree-GRPO's intra- and inter-tree levels [165], GRPO-MA's
thought advantage from several answers per thought [173] and SPO-tree's segment advantages [41] (rules of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`).

They read the rollout's declared :class:`~genalign.algorithms.structure.PrefixTree`: the sampling tree of LM tree
rollouts (``policy.tree``, :mod:`genalign.policies.lm.engines.tree`), the token prefix tree of a group of independent samples
(Prefix-to-Tree, :func:`~genalign.algorithms.structure.token_prefix_tree`) or a flow BranchGRPO tree. A node's value
is the mean outcome of the leaves below it; the outcomes are the sample advantages (the trainer's group-relative
advantages, a per-group affine map of the reward with positive slope, so means, differences and normalisations keep
their order and sign). A *tree* is the set of leaves whose first action leads into the same root (depth 0); a leaf
whose first action already branches belongs to its group's single tree.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.credit.trees import node_values
from genalign.algorithms.structure import PrefixTree
from genalign.experimental.credit.token_trees import temporal_differences


def _cpu_tree(batch: StepBatch, rule: str) -> PrefixTree:
    tree: PrefixTree = batch.require("prefix_tree", f"credit rule {rule!r}")
    return PrefixTree(tree.node_of_action.cpu(), tree.depth.cpu())  # small index work: on the CPU


def labelled_stats(values: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """``(mean [N], std [N])`` of ``values`` ``[N]`` over the entries sharing each entry's label (population std)."""
    _, index = labels.unique(return_inverse=True)  # [N]
    count = values.new_zeros(int(index.max()) + 1).index_add_(0, index, torch.ones_like(values))  # [K]
    mean = values.new_zeros(count.shape).index_add_(0, index, values) / count  # [K]
    var = values.new_zeros(count.shape).index_add_(0, index, (values - mean[index]) ** 2) / count  # [K]
    return mean[index], var.sqrt()[index]


def tree_labels(tree: PrefixTree, group_ids: Tensor) -> Tensor:
    """``[N]``: the tree of each leaf, the root its first action leads into; ``-1 - group`` when that action already
    branches (the group's virtual root)."""
    _, group = group_ids.unique(return_inverse=True)
    return torch.where(tree.depth[:, 0] == 0, tree.node_of_action[:, 0], -1 - group)


@CREDIT_RULES.register(
    "tree_grpo",
    needs=("prefix_tree",),
    formula="A_it ← A_it + c·(A_i − mean_τ A)/(std_τ A + ε), τ = the leaves of sample i's tree (intra-tree GRPO); the "
    "incoming A_it is the inter-tree level (GRPO over all trees of the prompt)",
    source="[165] Tree-GRPO (sum of intra- and inter-tree group-relative advantages)",
    summary="Add the advantage of each leaf relative to the other leaves of its own tree (a step-level preference "
    "between sibling branches) to its advantage among all trees of the prompt.",
)
def tree_grpo(advantages: Tensor, batch: StepBatch, *, intra_coef: float = 1.0, eps: float = 1e-6) -> Tensor:
    """Tree-GRPO [165]: group-relative advantages at two levels of tree rollouts.

    The prompt's group holds the leaves of several trees (``policy.tree.trees_per_prompt``). The *inter-tree* level is
    the usual group advantage over all of them (the incoming advantages, e.g. GRPO); the *intra-tree* level normalises
    each leaf's outcome among the leaves of its own tree, which compares branches that share a prefix (the paper shows
    it equals step-level preference learning). Tree-GRPO sums the two; ``intra_coef`` weighs the intra level (1 =
    the paper's plain sum). With one tree per prompt the two levels coincide up to ``eps``.

    Reading chosen: a "tree" is the set of leaves whose first action leads into the same root node, and the intra
    level normalises by the tree's standard deviation (the abstract names the two levels, not their normalisation).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages (the inter-tree level).
        batch: reads ``sample_advantages`` (outcomes), ``group_ids``, ``mask`` and ``prefix_tree``.
        intra_coef: ``c >= 0``.
        eps: added to the intra-tree standard deviation (a tree whose leaves agree gets 0).
    Returns:
        ``[N, T]`` ``advantages + c·A_intra`` (0 on padding).
    """
    if not intra_coef >= 0 or not eps > 0:
        raise ValueError(f"tree_grpo needs intra_coef >= 0 and eps > 0, got {intra_coef!r}, {eps!r}")
    tree = _cpu_tree(batch, "tree_grpo")
    outcome = batch["sample_advantages"].detach().float().cpu()  # [N]
    mean, std = labelled_stats(outcome, tree_labels(tree, batch.group_ids.cpu()))  # [N], [N]
    intra = ((outcome - mean) / (std + eps)).to(advantages.device, advantages.dtype)  # [N]
    return torch.where(batch.mask > 0, advantages + intra_coef * intra[:, None], 0.0)  # [N, T]


def thought_of_leaves(tree: PrefixTree, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``(thought [N], is_thought [N, T])``: the dense node index (of :func:`node_values`' numbering) of the node
    each leaf passes just before its last split, -1 when no action of the leaf leads into it; and which actions lie
    before that split (depth below the leaf's final depth)."""
    _, inverse = tree.node_of_action.unique(return_inverse=True)  # [N, T] the numbering of node_values
    valid = mask.cpu() > 0  # [N, T]
    steps = torch.arange(valid.shape[1]).expand_as(valid)
    last = torch.where(valid, steps, 0).max(1).values  # [N] last valid action
    final_depth = tree.depth.gather(1, last[:, None])  # [N, 1]
    is_thought = valid & (tree.depth < final_depth)  # [N, T]
    at_parent = valid & (tree.depth == final_depth - 1)  # [N, T] actions into the thought node
    has = at_parent.any(1)  # [N]
    where = torch.where(at_parent, steps, 0).max(1).values  # [N]
    thought = torch.where(has, inverse.gather(1, where[:, None]).squeeze(1), -1)  # [N]
    return thought, is_thought


@CREDIT_RULES.register(
    "grpo_ma",
    needs=("prefix_tree",),
    formula="θ_i = the node before leaf i's last split; V(θ) = mean of A_j over its answers j; A_θ = (V(θ) − mean_g V)"
    "/(std_g V + ε) over the distinct thoughts of the group; thought tokens get A_θ, answer tokens keep A_it",
    source="[173] GRPO-MA (several answers per thought; thought advantage from the mean over its answers)",
    summary="Give the tokens of a shared thought the advantage of its mean outcome over its several answers among "
    "the group's thoughts, and each answer its own advantage: lower-variance thought credit.",
)
def grpo_ma(advantages: Tensor, batch: StepBatch, *, eps: float = 1e-6) -> Tensor:
    """GRPO-MA [173]: a thought answered several times is credited with the mean outcome of its answers.

    Tree rollouts whose last split is the thought / answer boundary sample ``M`` answers per thought (e.g.
    ``policy.tree: {trees_per_prompt: K, split_positions: [p], branching: [M]}``: ``K`` thoughts of ``p`` tokens).
    The thought of a leaf is the node before its last split; its value ``V(θ)`` is the mean outcome of the leaves
    below it, and its advantage normalises ``V`` among the distinct thoughts of the group (the variance of this
    estimate falls as ``M`` grows). Tokens before the leaf's last split (the thought and its ancestors) get the
    thought advantage; the answer's tokens keep the incoming answer-level advantage (GRPO over all answers). A leaf
    that never split (ended early) has no thought tokens and is left unchanged.

    Reading chosen: the abstract describes one thought with several answers; for deeper trees we take the thought to
    be the node before the leaf's last split and normalise the thought values over the group's distinct thoughts.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages (the answer level).
        batch: reads ``sample_advantages``, ``group_ids``, ``mask`` and ``prefix_tree``.
        eps: added to the standard deviation over thoughts (a group with one thought gives 0).
    Returns:
        ``[N, T]`` per-action advantages (0 on padding).
    """
    if not eps > 0:
        raise ValueError(f"grpo_ma needs eps > 0, got {eps!r}")
    tree = _cpu_tree(batch, "grpo_ma")
    outcome = batch["sample_advantages"].detach().float().cpu()  # [N]
    _, _, value = node_values(tree, outcome, node_reward="mean", logp=None)  # [M] mean over the leaves below
    thought, is_thought = thought_of_leaves(tree, batch.mask)  # [N], [N, T]
    has = thought >= 0
    _, group = batch.group_ids.cpu().unique(return_inverse=True)  # [N]
    pairs = torch.stack([group[has], thought[has]]).unique(dim=1)  # [2, K] the distinct thoughts of each group
    mean, std = labelled_stats(value[pairs[1]], pairs[0])  # [K]
    lookup = {(int(g), int(t)): (float(m), float(s)) for g, t, m, s in zip(*pairs, mean, std, strict=True)}
    thought_adv = torch.zeros_like(outcome)  # [N]
    for i in has.nonzero().flatten().tolist():
        m, s = lookup[(int(group[i]), int(thought[i]))]
        thought_adv[i] = (value[thought[i]] - m) / (s + eps)
    thought_adv = thought_adv.to(advantages.device, advantages.dtype)
    result = torch.where(is_thought.to(advantages.device), thought_adv[:, None], advantages)  # [N, T]
    return torch.where(batch.mask > 0, result, 0.0)


@CREDIT_RULES.register(
    "spo_tree",
    needs=("prefix_tree",),
    replaces=True,
    formula="V(node) = mean of A_j over the leaves below; A_it = V(n_it) − V(parent(n_it)) for every action of node "
    "n_it (a segment); a root's parent is the group (its mean)",
    source="[41] SPO-tree (tree-based segment advantage estimation; the difference form is inferred from the abstract)",
    summary="Give every token of a tree segment the value of its node minus its parent's: segment-level Monte-Carlo "
    "credit from the tree's node values, without a critic.",
)
def spo_tree(advantages: Tensor, batch: StepBatch) -> Tensor:
    """SPO-tree [41]: segment advantages from the node values of a tree rollout.

    The segments of a leaf are the nodes on its path (the runs of tokens between splits); a node's value is the mean
    outcome of the leaves below it, a Monte-Carlo estimate shared by the siblings' subtrees, so long completions get
    segment credit at the cost of one tree. Every token of a segment gets ``V(node) − V(parent)``: how much better the
    leaves below this branch do than the leaves below its parent. A root segment gets ``V(root) − mean of the group``
    (0 with one tree per prompt, the tree's advantage with several). TEMPO's ``tree_td`` [255] adds the same
    difference at the first token of each segment only; SPO-tree spreads it over the segment and replaces the
    sample advantage.

    Reading chosen: outcomes are the sample advantages (a per-group affine map of the rewards), so the differences are
    the raw-reward differences divided by the group's scale; SPO's probability-mask strategy is not part of this rule.

    Args:
        advantages: ``[N, T]`` incoming advantages (replaced).
        batch: reads ``sample_advantages``, ``group_ids``, ``mask`` and ``prefix_tree``.
    Returns:
        ``[N, T]`` per-action segment advantages (0 on padding).
    """
    tree = _cpu_tree(batch, "spo_tree")
    outcome = batch["sample_advantages"].detach().float().cpu()  # [N]
    delta = temporal_differences(tree, outcome, batch.group_ids.cpu())  # [N, T] V(child) − V(parent) at node starts
    node = tree.node_of_action  # [N, T]
    starts = torch.ones_like(node, dtype=torch.bool)
    starts[:, 1:] = node[:, 1:] != node[:, :-1]  # [N, T] first action of each segment
    steps = torch.arange(node.shape[1]).expand_as(node)
    segment_start = torch.where(starts, steps, 0).cummax(1).values  # [N, T]
    result = delta.gather(1, segment_start).to(advantages.device, advantages.dtype)  # [N, T]
    return torch.where(batch.mask > 0, result, 0.0)
