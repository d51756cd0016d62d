"""Turn-level credit of multi-turn rollouts (rules of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`):
per-turn rewards as a discounted return-to-go, group statistics per (prompt, turn) (AT-GRPO [126]), turn-level values
from the group (turn-PPO [229]) and step-aligned credit (StepPO [7]).

Every rule reads the rollout's ``turn_ids`` (:mod:`genalign.algorithms.turns`: the model turn of each action; the
environment's tokens are never trained) and writes one advantage per (sample, turn) on the turn's actions. The
per-turn rewards are ``turn_rewards`` ``[N, K]`` (the environment's ``StepResult.reward`` of each turn, NaN where it
gave none); the episode's outcome is the combined reward of the configured reward functions (``combined_reward``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.advantages.group_baselines import dr_grpo, grpo
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.ratio_levels.future import discounted_future_sum
from genalign.algorithms.turns import (
    group_turn_stats,
    last_turns,
    per_turn,
    turn_layout,
    turn_means,
    turn_reward_table,
)


def _check(eps: float, **fractions: float) -> None:
    """Each of ``fractions`` (discounts, GAE λ) in ``[0, 1]`` and ``eps >= 0``, else an error naming them."""
    bad = {name: value for name, value in fractions.items() if not 0.0 <= value <= 1.0}
    if bad or not eps >= 0.0:
        shown = ", ".join(f"{name}={value!r}" for name, value in {**fractions, "eps": eps}.items())
        raise ValueError(f"need {', '.join(fractions)} in [0, 1] and eps >= 0, got {shown}")


def _group_normalised(table: Tensor, group_ids: Tensor, scale_by_std: bool, eps: float) -> Tensor:
    """``[N, K]``: each column normalised within the group over the samples that have a value (GRPO; Dr. GRPO without
    the std); 0 where the value is missing (NaN) or fewer than two samples of the group have one."""
    group_ids = group_ids.to(table.device)
    return grpo(table, group_ids, eps=eps) if scale_by_std else dr_grpo(table, group_ids)


def _outcome(batch: StepBatch, rule: str, like: Tensor) -> Tensor:
    """``[N]`` the combined reward of each sample (NaN: none), in the dtype and on the device of ``like``."""
    return batch.require("combined_reward", f"credit rule {rule!r}").to(like.device, like.dtype)


# ------------------------------------------------------------------------------------------ per-turn return-to-go
@CREDIT_RULES.register(
    "turn_reward_to_go",
    needs=("turn_ids", "turn_rewards"),
    formula="z_ik = (r_ik − mean_{G,k} r)/(std_{G,k} r + eps) over the group's samples with a reward at turn k "
    "(r = turn_rewards); A_it ← A_it + c·Σ_{j≥k} γ^{j−k} z_ij for t in turn k",
    source="turn-level advantages from per-turn environment rewards (genalign's form)",
    summary="Per-turn rewards normalised within (prompt, turn), summed as a discounted return-to-go over the later "
    "turns and added to each turn's actions on top of the outcome advantage.",
)
def turn_reward_to_go(
    advantages: Tensor,
    batch: StepBatch,
    *,
    gamma: float = 1.0,
    coef: float = 1.0,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Turn-level advantages from the environment's per-turn rewards: turn ``k`` of sample ``i`` is credited with what
    it and the later turns earned compared with the same turns of the group's other trajectories.

    Reading chosen: each turn's reward is normalised within its (prompt, turn) first, ``z_ik`` (GRPO over the
    group's samples that received a reward at turn ``k``; ``scale_by_std=False``: mean-centred only), then
    accumulated as a discounted return-to-go over turns; the result is *added* to the incoming (outcome) advantage, so
    the rule stacks after the estimator and other rules (the turn + outcome sum of multi-turn GRPO variants). A turn
    without a reward contributes 0; so does a turn whose group has fewer than two rewards at that turn.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages (the outcome advantage for the first rule).
        batch: reads ``turn_ids`` ``[N, T]``, ``turn_rewards`` ``[N, K]``, ``group_ids`` and ``mask``.
        gamma: discount over turns, in ``[0, 1]`` (0: each turn gets its own normalised reward only).
        coef: ``c``, the weight of the turn term.
        scale_by_std: divide by the (prompt, turn) std (GRPO) or not (Dr. GRPO).
        eps: added to the std.
    Returns:
        ``[N, T]`` per-action advantages (unchanged on padding and environment tokens).
    """
    _check(eps, gamma=gamma)
    layout = turn_layout(batch, "credit rule 'turn_reward_to_go'")
    rewards = turn_reward_table(batch, "credit rule 'turn_reward_to_go'", layout.present).to(advantages.dtype)
    normalised = _group_normalised(rewards, batch.group_ids, scale_by_std, eps)  # [N, K] z_ik, 0 where absent
    to_go = discounted_future_sum(normalised, gamma)  # [N, K]
    bonus = per_turn(to_go, layout.turns).to(advantages.device)  # [N, T]
    return torch.where(layout.valid, advantages + coef * bonus, advantages)


# ------------------------------------------------------------------------------------------------------- AT-GRPO
@CREDIT_RULES.register(
    "at_grpo",
    needs=("turn_ids", "turn_rewards", "combined_reward"),
    replaces=True,
    formula="u_ik = r_ik + α·R_i (r = turn_rewards, 0 where none; R = the episode's combined reward); "
    "A_ik = (u_ik − mean_{G,k} u)/(std_{G,k} u + eps) over the group's samples that reached turn k; A_it = A_ik",
    source="[126] AT-GRPO (agent- and turn-wise grouping)",
    summary="Group statistics per (prompt, turn) instead of per prompt: each turn is compared with the same turn of "
    "the group's other trajectories, on its own reward plus the shared outcome.",
)
def at_grpo(
    advantages: Tensor,
    batch: StepBatch,
    *,
    team_coef: float = 1.0,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """AT-GRPO [126]: standard GRPO grouping assumes one prompt per group, which breaks in multi-turn (and
    multi-agent) workflows where the prompt changes with the turn; AT-GRPO forms its groups per agent and per turn.

    Reading chosen: the group of turn ``k`` is the samples of one prompt that reached turn ``k`` (genalign's groups
    are trajectories of one prompt, not candidates sampled from one shared turn state); with one policy playing the
    agents in a fixed turn order the agent is a function of the turn, so the (prompt, agent, turn) key is the
    (prompt, turn) key. The reward of a turn mixes its local reward (``turn_rewards``, 0 where the environment gave
    none) with the shared (team) outcome ``R_i`` weighted by ``α``; with no per-turn rewards the rule is GRPO in which
    turn ``k`` is compared only with trajectories that lasted ``k`` turns. It replaces the incoming advantages.

    Args:
        advantages: ``[N, T]`` (ignored: the rule replaces them; put it first).
        batch: reads ``turn_ids``, ``turn_rewards``, ``combined_reward`` ``[N]``, ``group_ids`` and ``mask``.
        team_coef: ``α >= 0``, the weight of the shared outcome in every turn's reward.
        scale_by_std: divide by the (prompt, turn) std (GRPO) or not (Dr. GRPO).
        eps: added to the std.
    Returns:
        ``[N, T]`` per-action advantages (0 on padding and environment tokens).
    """
    if team_coef < 0 or eps < 0:
        raise ValueError(f"need team_coef >= 0 and eps >= 0, got team_coef={team_coef!r}, eps={eps!r}")
    layout = turn_layout(batch, "credit rule 'at_grpo'")
    rewards = turn_reward_table(batch, "credit rule 'at_grpo'", layout.present).to(advantages.dtype)  # [N, K]
    local = torch.where(layout.present, rewards.nan_to_num(0.0), torch.nan)  # [N, K]
    team = team_coef * _outcome(batch, "at_grpo", local)[:, None] if team_coef > 0 else 0.0  # [N, 1]
    per_turn_advantage = _group_normalised(local + team, batch.group_ids, scale_by_std, eps)  # [N, K]
    result = per_turn(per_turn_advantage, layout.turns).to(advantages.device)  # [N, T]
    return torch.where(layout.valid, result, 0.0).to(advantages.dtype)


# ----------------------------------------------------------------------------------------------------- turn-PPO
def turn_returns(
    batch: StepBatch, rule: str, present: Tensor, gamma: float, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """``(u [N, K], G [N, K])``: the reward of each turn (its environment reward, 0 where none, plus the episode's
    combined reward at the sample's last turn) and its discounted return-to-go ``G_ik = Σ_{j≥k} γ^{j−k} u_ij`` (NaN
    where the turn is absent, and on every turn of a sample without a combined reward)."""
    rewards = turn_reward_table(batch, f"credit rule {rule!r}", present).to(dtype)  # [N, K]
    outcome = _outcome(batch, rule, rewards)[:, None]  # [N, 1]
    earned = rewards.nan_to_num(0.0) + torch.where(last_turns(present), outcome, 0.0)  # [N, K] u_ik
    return earned, torch.where(present, discounted_future_sum(earned, gamma), torch.nan)


def turn_gae(earned: Tensor, values: Tensor, present: Tensor, gamma: float, lam: float) -> Tensor:
    """``[N, K]`` GAE over turns: ``δ_ik = u_ik + γ·V_{i,k+1}·1[i reached k+1] − V_ik`` and ``A_ik = Σ_{j≥k}
    (γλ)^{j−k} δ_ij`` from the turn rewards ``earned`` ``[N, K]`` and the state values ``values`` ``[N, K]``; 0 on an
    absent turn (NaN where a value or reward is NaN on a present turn)."""
    reached = torch.cat([present[:, 1:], torch.zeros_like(present[:, :1])], 1)  # [N, K] i reached turn k + 1
    following = torch.where(reached, torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], 1), 0.0)
    deltas = torch.where(present, earned + gamma * following - values, 0.0)  # [N, K]
    return discounted_future_sum(deltas, gamma * lam)


@CREDIT_RULES.register(
    "turn_baseline",
    needs=("turn_ids", "turn_rewards", "combined_reward"),
    replaces=True,
    formula="u_ik = r_ik (0 where none) + R_i at the last turn; G_ik = Σ_{j≥k} γ^{j−k} u_ij; V_{G,k} = mean of G_·k "
    "over the group's samples that reached turn k; δ_ik = u_ik + γ·V_{G,k+1}·1[i reached k+1] − V_{G,k}; "
    "A_ik = Σ_{j≥k} (γλ)^{j−k} δ_ij (λ = 1: G_ik − V_{G,k}); A_it = A_ik",
    source="[229] turn-PPO (turn-level MDP; the group's returns stand in for the critic)",
    summary="Turn-level GAE whose state values are the group's mean return from the same turn: turn-PPO's "
    "advantages without a critic, for a group-relative backend.",
)
def turn_baseline(
    advantages: Tensor,
    batch: StepBatch,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
    scale_by_std: bool = False,
    eps: float = 1e-6,
) -> Tensor:
    """turn-PPO [229]: PPO on a turn-level MDP (a turn is one action, its state the conversation before it), with
    GAE over turns instead of tokens.

    Reading chosen: genalign's backend is group-relative and has no critic, so the value of the state at turn ``k``
    is estimated from the group: ``V_{G,k}`` is the mean return-to-go ``G_·k`` of the group's samples that reached
    turn ``k`` (a Monte-Carlo estimate of the turn-``k`` value under the current policy, conditioned on lasting ``k``
    turns). The reward of turn ``k`` is its environment reward plus, at the sample's last turn, the episode's combined
    reward. ``λ = 1`` gives ``G_ik − V_{G,k}``; smaller ``λ`` bootstraps from the next turn's group value.
    ``scale_by_std`` divides by the std of ``G_·k`` in the group (off by default, as PPO's advantages). It
    replaces the incoming advantages. A sample without a combined reward gets 0. The learned critic (a probe on the
    policy's hidden states fitted on earlier steps' returns) is ``turn_critic``.

    Args:
        advantages: ``[N, T]`` (ignored: the rule replaces them; put it first).
        batch: reads ``turn_ids``, ``turn_rewards``, ``combined_reward``, ``group_ids`` and ``mask``.
        gamma: discount over turns, in ``[0, 1]``.
        lam: GAE ``λ`` over turns, in ``[0, 1]``.
        scale_by_std: divide by the (prompt, turn) std of the returns.
        eps: added to that std.
    Returns:
        ``[N, T]`` per-action advantages (0 on padding and environment tokens).
    """
    _check(eps, gamma=gamma, lam=lam)
    layout = turn_layout(batch, "credit rule 'turn_baseline'")
    present = layout.present  # [N, K]
    earned, returns = turn_returns(batch, "turn_baseline", present, gamma, advantages.dtype)  # [N, K] u_ik, G_ik
    stats, groups = group_turn_stats(returns, batch.group_ids)
    result = turn_gae(earned, stats.mean[groups.index], present, gamma, lam)  # [N, K] with V_{G,k}
    if scale_by_std:
        result = result / (stats.std[groups.index] + eps)
    result = torch.where(present, result, 0.0).nan_to_num(0.0)  # a sample without an outcome: 0
    return torch.where(layout.valid, per_turn(result, layout.turns).to(advantages.device), 0.0)


# -------------------------------------------------------------------------------------------------------- StepPO
@CREDIT_RULES.register(
    "step_aligned",
    needs=("turn_ids",),
    formula="Ā_ik = mean_{t∈step k} A_it; A_it ← Ā_ik·L_i/(K_i·L_ik) for t in step k (L_ik actions in step k, "
    "L_i = Σ_k L_ik, K_i steps); equal_steps=false: A_it ← Ā_ik",
    source="[7] StepPO (step-level credit assignment)",
    summary="Interaction steps, not tokens, are the units of credit: one advantage per step, and every step of a "
    "trajectory weighs the same in the loss whatever its number of tokens.",
)
def step_aligned(advantages: Tensor, batch: StepBatch, *, equal_steps: bool = True) -> Tensor:
    """StepPO [7]: agentic RL as a step-level MDP whose actions are the interaction steps (a model turn between two
    observations), with credit assigned per step rather than per token.

    Reading chosen: the steps are the rollout's model turns (``turn_ids``). Each step gets one advantage, the mean of
    the incoming per-action advantages over its actions (so the rule composes: after ``turn_baseline`` or
    ``turn_reward_to_go`` the step advantages come from per-step returns; after a plain estimator they are the
    outcome advantage). With ``equal_steps`` each action of step ``k`` carries ``Ā_ik·L_i/(K_i·L_ik)``: under a
    token-summing aggregation every step then weighs ``Ā_ik·L_i/K_i``, the same for a one-token command as for a long
    reasoning turn, while the sample keeps its total weight ``L_i``. The step-level importance ratio is the ratio
    level ``turn``.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``turn_ids`` and ``mask``.
        equal_steps: rescale so that every step of a sample weighs the same.
    Returns:
        ``[N, T]`` per-action advantages (unchanged on padding and environment tokens).
    """
    layout = turn_layout(batch, "credit rule 'step_aligned'")
    lengths = layout.lengths.to(advantages.device, advantages.dtype)  # [N, K]
    step = turn_means(advantages, layout.turns, layout.valid, layout.width)  # [N, K] Ā_ik, NaN where absent
    if equal_steps:
        total = lengths.sum(1, keepdim=True)  # [N, 1] L_i
        steps = (lengths > 0).sum(1, keepdim=True).clamp_min(1)  # [N, 1] K_i
        step = step * total / (steps * lengths.clamp_min(1.0))  # [N, K]
    return torch.where(layout.valid, per_turn(step.nan_to_num(0.0), layout.turns), advantages)
