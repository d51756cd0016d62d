"""The polychromic set objective [242] on vine states: sets are drawn among the continuations of one intermediate
state (a node of the group's prefix tree: with ``policy.tree`` rollouts, the continuations sampled from it), and each
completion gets its set-level marginal advantage there (a rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`;
the set scores are those of the reward shaper ``polychromic_sets``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from genalign.algorithms._validation import check_float_tensor
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.credit.trees import node_values
from genalign.algorithms.structure import PrefixTree
from genalign.experimental.shaping.diversity import sequence_embeddings
from genalign.experimental.shaping.polychromic import pool_set_scores


def vine_pools(tree: PrefixTree, group_ids: Tensor, set_size: int) -> Tensor:
    """``[N]`` long pool id of every sample: the deepest node of its path through the prefix tree that at least
    ``set_size`` samples pass through (its vine state), or its group (the prompt: the state every sample starts
    from) when no node has as many. Ids are dense, pools of different groups are distinct."""
    inverse, member, _ = node_values(tree, torch.zeros(tree.num_samples), node_reward="mean", logp=None)
    node_depth = torch.zeros(member.shape[1], dtype=torch.long).scatter_reduce(
        0, inverse.flatten(), tree.depth.flatten().long(), reduce="amax", include_self=False
    )  # [M]
    wide = member & (member.sum(0) >= set_size)[None, :]  # [N, M] nodes on i's path with enough samples
    depth = torch.where(wide, node_depth[None, :] + 1, 0)  # [N, M] 0 = not a candidate
    best = depth.argmax(1)  # [N] the deepest candidate node
    has = depth.gather(1, best[:, None]).squeeze(1) > 0  # [N]
    _, groups = group_ids.unique(return_inverse=True)  # [N]
    key = torch.where(has, best, member.shape[1] + groups)  # [N] a node, or the group past the node ids
    return key.unique(return_inverse=True)[1]


@CREDIT_RULES.register(
    "polychromic_vine",
    needs=("hidden", "prefix_tree", "combined_reward"),
    replaces=True,
    formula="vine state s(i) = deepest node of i's prefix-tree path with >= n samples (else the prompt); sets S of n "
    "continuations of s; f(S) = (mean_{j∈S} r_j)·d(S); r̃_i = mean_{S∋i} f(S) − mean_{S of s(i)} f(S)",
    source="[242] polychromic objective with vine sampling (sets of continuations from intermediate states; sample "
    "them with policy.tree)",
    summary="Polychromic set objective on vine rollouts: sets are continuations of the same intermediate state, and "
    "each completion gets its set-level marginal advantage at that state.",
)
def polychromic_vine(
    advantages: Tensor,
    batch: StepBatch,
    *,
    set_size: int = 2,
    similarity_threshold: float = 0.95,
    max_sets: int = 4096,
    seed: int = 0,
) -> Tensor:
    """The polychromic objective [242] with vine sampling: the sets are continuations of one intermediate state.

    Polychromic PPO collects rollouts by vine sampling: from states along a trajectory, several continuations are
    sampled, and the advantage of a continuation is its marginal value under the set objective at that state. With
    tree rollouts (``policy.tree``: every node splits into ``branching`` continuations of the same prefix) the group's
    prefix tree holds those states. Each completion's vine state is the deepest node of its path shared by at least
    ``n`` completions; sets of ``n`` are drawn among the continuations of that state, scored ``f(S) = (mean reward) ·
    (diversity)`` as in ``polychromic_sets``, and the completion gets ``mean_{S ∋ i} f(S) − mean_S f(S)`` over its
    state's sets: its set-level marginal advantage at the state (0 on average over a state's continuations).

    Reading chosen: the abstract gives vine sampling and a polychromic advantage without their forms; genalign reads
    the states from the prefix tree (tree rollouts, or the shared prefixes of independent samples, where states are
    rarer), assigns each completion to one state (its deepest with enough continuations; the prompt when none), and
    gives the marginal advantage to every action of the completion (a credit rule that replaces the estimator's
    advantages: they are already centred per state).

    Args:
        advantages: ``[N, T]`` ignored (``replaces=True``).
        batch: reads ``combined_reward`` ``[N]``, ``hidden`` ``[N, T, H]``, ``prefix_tree``, ``mask`` and
            ``group_ids``.
        set_size, similarity_threshold, max_sets, seed: as for ``polychromic_sets`` (``n = 2`` by default: the
            fewest continuations a branching node has).
    Returns:
        ``[N, T]`` the completion's marginal set advantage on its valid actions (0 on padding, for a missing reward
        and in a state with fewer valid completions than ``n``).
    """
    if set_size < 1 or not 0 < similarity_threshold <= 1 or max_sets < 1:
        raise ValueError(f"polychromic_vine: need set_size >= 1, similarity_threshold in (0, 1] and max_sets >= 1; got "
                         f"{set_size!r}, {similarity_threshold!r}, {max_sets!r}.")  # fmt: skip
    rewards = check_float_tensor(batch.require("combined_reward", "credit rule 'polychromic_vine'"), "rewards", "[N]")
    tree: PrefixTree = batch.require("prefix_tree", "credit rule 'polychromic_vine'")
    tree = PrefixTree(tree.node_of_action.cpu(), tree.depth.cpu())
    embeddings = F.normalize(sequence_embeddings(batch.require("hidden", "polychromic_vine"), batch.mask), dim=1)
    pools = vine_pools(tree, batch.group_ids.cpu(), set_size)  # [N]
    values, present = rewards.detach().double().cpu(), ~torch.isnan(rewards.detach().cpu())
    shaped = torch.zeros(values.shape[0], dtype=torch.float64)  # [N]
    generator = torch.Generator().manual_seed(seed)
    for pool in range(int(pools.max()) + 1 if pools.numel() else 0):
        members = torch.nonzero((pools == pool) & present).flatten()  # [m]
        if members.numel() < set_size:
            continue
        unit = embeddings[members].double().cpu()  # [m, H]
        member_score, mean_score, _ = pool_set_scores(
            values[members], unit, set_size, similarity_threshold, max_sets=max_sets, generator=generator
        )
        shaped[members] = member_score - mean_score
    credit = shaped.to(advantages.device, advantages.dtype)[:, None]  # [N, 1]
    return torch.where(batch.mask > 0, credit, 0.0)  # [N, T]
