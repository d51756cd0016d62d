"""T-SPMO's token-level prefix matching [312]: the credit of choosing token ``v`` after prefix ``p`` is how much better
the group's completions that continue ``p`` with ``v`` do than all completions with prefix ``p`` (a rule of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`).

The group's completions form a token prefix tree (:func:`~genalign.algorithms.structure.token_prefix_tree`); the
value of a node is the mean reward of the completions through it, so the credit of an action is the temporal
difference ``V(p·v) − V(p)`` of :func:`genalign.experimental.credit.token_trees.temporal_differences` (TEMPO [255]
adds it to GRPO's advantage; T-SPMO uses it alone, and counts each distinct ``(p, v)`` once).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.structure import PrefixTree
from genalign.experimental.credit.token_trees import process_set_sizes, temporal_differences


@CREDIT_RULES.register(
    "prefix_matching",
    needs=("prefix_tree", "combined_reward"),
    replaces=True,
    formula="A_it = E[R | p_t·v_t] − E[R | p_t] over the group's completions sharing the prefix (÷ their number "
    "with count_once)",
    source="[312] T-SPMO (token-specific prefix matching; the value source and the once-per-pair weight are inferred)",
    summary="Token credit from prefix matching inside the group: each token gets the mean reward of the completions "
    "that continue its prefix with it minus the mean reward of all completions with that prefix.",
)
def prefix_matching(
    advantages: Tensor,
    batch: StepBatch,
    *,
    value: Literal["reward", "advantage"] = "reward",
    count_once: bool = True,
) -> Tensor:
    """T-SPMO [312]: token-level credit from the group's own completions, without a critic.

    For each distinct (prefix ``p``, next token ``v``) in the group, ``A(p, v) = E[R | p·v] − E[R | p]``: the mean
    reward of the completions whose first tokens are ``p·v`` minus the mean reward of those starting with ``p`` (the
    empty prefix: the whole group). A token that no other completion of the group shares a prefix with keeps the
    same difference at its branching token and 0 after it (its prefix value no longer changes), so the signal
    concentrates on the tokens where the group's completions part ways. The differences telescope: along a
    completion they sum to ``R_i − mean_group(R)``.

    Reading chosen: the abstract names the prefix matching only. ``value='reward'`` uses the combined reward (the
    paper's expected reward of the matching completions); ``'advantage'`` the sample advantages of the configured
    estimator instead (e.g. GRPO's group-normalised rewards). ``count_once`` divides each action's credit by the number
    of completions sharing its ``(p, v)`` so that every distinct pair enters the loss once, as in a sum over the
    distinct pairs of the group (λ-GRPO's process-set balance [322]); ``False`` keeps one term per completion.

    Args:
        advantages: ``[N, T]`` ignored (``replaces=True``: the rule derives its credit from the tree and the values).
        batch: reads ``combined_reward`` (``value='reward'``) or ``sample_advantages``, ``group_ids``, ``mask`` and
            ``prefix_tree``.
        value: ``'reward'`` or ``'advantage'``.
        count_once: weight each distinct ``(p, v)`` once.
    Returns:
        ``[N, T]`` per-token credit (0 on padding).
    """
    if value not in ("reward", "advantage"):
        raise ValueError(f"prefix_matching: value={value!r} must be 'reward' or 'advantage'.")
    tree: PrefixTree = batch.require("prefix_tree", "credit rule 'prefix_matching'")
    tree = PrefixTree(tree.node_of_action.cpu(), tree.depth.cpu())  # small index work: on the CPU
    source = "combined_reward" if value == "reward" else "sample_advantages"
    leaf = batch.require(source, f"credit rule 'prefix_matching' (value={value!r})").detach().float().cpu()  # [N]
    credit = temporal_differences(tree, leaf, batch.group_ids.cpu())  # [N, T]
    if count_once:
        credit = credit / process_set_sizes(tree).to(credit.dtype)  # [N, T]
    credit = credit.to(advantages.device, advantages.dtype)
    return torch.where(batch.mask > 0, credit, 0.0)  # [N, T]
