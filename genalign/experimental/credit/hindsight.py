"""Hindsight credit at the turns of multi-turn rollouts (HCAPO [95]), a rule of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`.

Hindsight credit assignment asks how much more likely a step becomes once the outcome is known: the hindsight ratio
``ρ = h(a | s, Z) / π(a | s)``, equal by Bayes' rule to ``P(Z | s, a) / P(Z | s)``. A step with ``ρ > 1`` is typical of
trajectories that ended with outcome ``Z``; ``ρ < 1`` marks a step that trajectories with this outcome took less
often than others from the same state. Here the probabilities are counted among the trajectories of one prompt.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.turns import TurnLayout, per_turn, turn_layout

Action = tuple[int, ...]


def turn_actions(action_ids: Tensor, layout: TurnLayout) -> list[list[Action | None]]:
    """For each sample and turn, the token ids of the turn's valid actions (``action_ids`` ``[N, T]``), None for an
    absent turn: ``N`` lists of ``K`` entries."""
    ids, turns, valid = action_ids.long().cpu(), layout.turns.cpu(), layout.valid.cpu()
    present = layout.present.cpu().tolist()
    out = []
    for i in range(ids.shape[0]):
        tokens: list[list[int]] = [[] for _ in range(layout.width)]
        for token, turn in zip(ids[i][valid[i]].tolist(), turns[i][valid[i]].tolist(), strict=True):
            tokens[min(turn, layout.width - 1)].append(token)
        out.append([tuple(part) if present[i][k] else None for k, part in enumerate(tokens)])
    return out


def hindsight_ratios(actions: list[list[Action | None]], group_ids: list[int], outcomes: list[bool],
                     *, min_count: int) -> Tensor:  # fmt: skip
    """``[N, K]`` float64 ``ρ_ik = P̂(Z_i | s_ik, a_ik) / P̂(Z_i | s_ik)``, counted over the samples that share the
    state ``s_ik`` (the same group and the same earlier turns) and the action ``a_ik`` (the same tokens); 1 for an
    absent turn and for a (state, action) pair seen fewer than ``min_count`` times (no hindsight evidence).

    Args:
        actions: from :func:`turn_actions`.
        group_ids: ``N`` group ids.
        outcomes: ``N`` outcome classes ``Z_i``.
        min_count: occurrences of a (state, action) pair needed to estimate its ratio.
    """
    counts: Counter = Counter()
    keys: dict[tuple[int, int], tuple] = {}
    for i, turns in enumerate(actions):
        history: tuple[Action, ...] = ()
        for k, action in enumerate(turns):
            if action is None:
                continue
            state, outcome = (group_ids[i], history), outcomes[i]
            counts.update(
                [("s", state), ("sz", state, outcome), ("sa", state, action), ("saz", state, action, outcome)]
            )
            keys[(i, k)] = (state, action, outcome)
            history += (action,)
    ratios = torch.ones(len(actions), max((len(turns) for turns in actions), default=1), dtype=torch.float64)
    for (i, k), (state, action, outcome) in keys.items():
        seen = counts[("sa", state, action)]
        if seen >= min_count:
            given_action = counts[("saz", state, action, outcome)] / seen  # P(Z | s, a)
            prior = counts[("sz", state, outcome)] / counts[("s", state)]  # P(Z | s)
            ratios[i, k] = given_action / prior
    return ratios


@CREDIT_RULES.register(
    "hcapo",
    needs=("turn_ids", "action_ids", "sample_advantages"),
    formula="s_ik = (prompt, model turns before k), a_ik = the tokens of turn k, Z_i = 1[Â_i > 0]; "
    "ρ_ik = P̂(Z_i | s_ik, a_ik)/P̂(Z_i | s_ik) counted in the group (1 when (s, a) occurs fewer than m times); "
    "A_it ← A_it·(1 + ω·clamp(1 − 1/ρ_ik, −1, 1)) for t in turn k",
    source="[95] HCAPO (hindsight ratio counted in the group; no LLM critic)",
    summary="Hindsight multi-scale credit: the trajectory advantage plus a step term, larger for a turn that, from "
    "the same state, recurs with the sample's outcome and smaller for one that recurs with the opposite outcome.",
)
def hcapo(advantages: Tensor, batch: StepBatch, *, coef: float = 1.0, min_count: int = 2) -> Tensor:
    """HCAPO [95]: the LLM itself acts as a post-hoc critic that refines step-level Q-values by hindsight reasoning
    (the hindsight ratio ``ρ`` of each step), and a multi-scale advantage supplements GRPO's group baseline, which is
    misaligned for intermediate states, at the critical decision states.

    Reading chosen: no LLM critic. genalign's judge (the ``llm_judge`` reward) scores whole samples, and the
    hindsight-conditioned re-scoring it has (``teacher_logp``, the completion scored with the reference answer in the
    prompt) is recorded by single-turn rollouts only, so nothing can score a turn given the episode's outcome. The
    hindsight ratio is counted in the group instead: the outcome class is ``Z_i = 1[Â_i > 0]`` (better than its
    group), the state of turn ``k`` is the prompt with the sample's exact earlier model turns (the environment's
    answers are assumed to follow from them), the action is the turn's exact tokens, and
    ``ρ = P̂(Z | s, a) / P̂(Z | s)``. A (state, action) pair seen fewer than ``min_count`` times carries no evidence
    (``ρ = 1``), so free-text turns that never repeat keep the trajectory advantage; the term acts where actions
    recur (tool calls, commands of text environments, the first turns of a converged policy). Multi-scale:
    ``A·(1 + ω·clamp(1 − 1/ρ, −1, 1))``, the trajectory-scale advantage plus ``ω`` times the hindsight estimator
    ``(1 − π/h)·A``, clamped so that no step flips the sign of its outcome's credit.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages (the trajectory scale).
        batch: reads ``turn_ids``, ``action_ids`` ``[N, T]``, ``sample_advantages`` ``[N]``, ``group_ids``, ``mask``.
        coef: ``ω`` in ``[0, 1]``.
        min_count: occurrences (>= 1) of a (state, action) pair needed before its ratio is used.
    Returns:
        ``[N, T]`` advantages (unchanged on padding and environment tokens).
    """
    if not 0.0 <= coef <= 1.0 or not (isinstance(min_count, int) and min_count >= 1):
        raise ValueError(
            f"need coef in [0, 1] and an integer min_count >= 1, got coef={coef!r}, min_count={min_count!r}"
        )
    layout = turn_layout(batch, "credit rule 'hcapo'")
    actions = turn_actions(batch.require("action_ids", "credit rule 'hcapo'"), layout)
    outcomes = (batch.require("sample_advantages", "credit rule 'hcapo'") > 0).tolist()
    ratios = hindsight_ratios(actions, batch.group_ids.tolist(), outcomes, min_count=min_count)  # [N, K]
    step_term = (1.0 - 1.0 / ratios).clamp(-1.0, 1.0)  # [N, K]
    factor = per_turn((1.0 + coef * step_term).to(advantages.device, advantages.dtype), layout.turns)  # [N, T]
    return torch.where(layout.valid, advantages * factor, advantages)
