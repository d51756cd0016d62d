"""Tool-call efficiency (OTC-PO [302]): a reward shaper of :data:`REWARD_SHAPERS` that multiplies each sample's reward
by a tool reward, highest at the fewest tool calls that still reach a correct answer.

The tool calls of a sample are the rollout's ``tool_calls`` ``[N]`` (every call the model made over its episode, failed
ones included; recorded by multi-turn rollouts); correctness is one raw reward column.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms._groups import make_groups
from genalign.algorithms._validation import check_float_tensor
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.reward_shaping.base import REWARD_SHAPERS


def tool_reward(calls: Tensor, optimal: Tensor, *, smoothing: float) -> Tensor:
    """OTC's tool reward ``[N]`` of ``m`` = ``calls`` ``[N]`` tool calls when ``n`` = ``optimal`` ``[N]`` is the optimal
    number: ``cos(m·π / (2m + c))`` when ``n = 0`` (1 at ``m = 0``, falling towards 0 as ``m`` grows), otherwise
    ``sin(f(m, n)·π / (2n))`` with ``f(m, n) = 2nm / (m + n)``, which is 1 at ``m = n`` and falls on both sides
    (0 at ``m = 0``: a needed tool was not called)."""
    m, n = calls.double(), optimal.double()
    without = torch.cos(m * math.pi / (2.0 * m + smoothing))  # [N] n = 0
    mapped = 2.0 * n * m / (m + n).clamp_min(1.0)  # [N] f(m, n)
    with_tools = torch.sin(mapped * math.pi / (2.0 * n).clamp_min(1.0))  # [N] n > 0
    return torch.where(n > 0, with_tools, without)


def optimal_calls(calls: Tensor, correct: Tensor, group_ids: Tensor) -> Tensor:
    """``[N]``: the fewest tool calls among the correct samples of each sample's group (0 for a group without one)."""
    groups = make_groups(group_ids.to(calls.device), calls.shape[0], min_size=1)
    candidates = torch.where(correct, calls.double(), torch.inf)  # [N]
    fewest = candidates.new_full((groups.num_groups,), torch.inf).scatter_reduce(0, groups.index, candidates, "amin")
    return torch.where(torch.isinf(fewest), 0.0, fewest)[groups.index]  # [N]


@REWARD_SHAPERS.register(
    "otc",
    needs=("tool_calls", "rewards"),
    formula="r̃_i = α·r_tool(m_i, n)·r_i; m_i = tool calls; n = fewest tool calls among the group's correct samples "
    "(0 without one; mode=ppo: n = 0); r_tool = cos(mπ/(2m + c)) if n = 0, else sin(f(m, n)·π/(2n)) with "
    "f(m, n) = 2nm/(m + n)",
    source="[302] OTC-PO (OTC-GRPO; mode=ppo: OTC-PPO)",
    summary="Tool-call efficiency: the reward is scaled by a tool reward that peaks at the fewest tool calls a "
    "correct answer to the prompt needed and falls with extra (or missing) calls.",
)
def otc(
    rewards: Tensor,
    batch: StepBatch,
    *,
    mode: Literal["grpo", "ppo"] = "grpo",
    alpha: float = 1.0,
    smoothing: float = 1.0,
    success_column: int = 0,
    success_threshold: float = 0.5,
) -> tuple[Tensor, dict[str, float]]:
    """Optimal Tool Call-controlled Policy Optimization [302]: a tool-integrated reward ``α·r_tool·r`` that keeps
    the correctness reward ``r`` as the source of direction and scales it by the tool productivity of the sample, so
    a correct answer reached with the fewest calls is worth most and a correct answer after needless calls less.

    OTC-GRPO (``mode="grpo"``) estimates the optimal number of calls ``n`` of a prompt by the fewest calls among the
    group's correct samples (correct: reward column ``success_column`` above ``success_threshold``) and uses
    ``r_tool = sin(f(m, n)·π/(2n))``, ``f(m, n) = 2nm/(m+n)``: the peak is at ``m = n``, fewer calls (down to a needed
    tool never called) and more calls both lose. With ``n = 0`` (a correct sample without any call, or no correct
    sample in the group) and in OTC-PPO (``mode="ppo"``, no group) it is ``cos(m·π/(2m + c))``, 1 without calls.
    The product is meant for a non-negative correctness reward (a negative reward would be shrunk towards 0 by extra
    calls). A missing (NaN) reward stays missing.

    Args:
        rewards: ``[N]`` combined rewards.
        batch: reads ``tool_calls`` ``[N]``, ``rewards`` ``[N, K]`` and ``group_ids``.
        mode: ``"grpo"`` (optimal calls from the group) or ``"ppo"`` (``n = 0``).
        alpha: ``α > 0``.
        smoothing: ``c > 0``, how slowly ``cos(m·π/(2m + c))`` falls with ``m``.
        success_column: the raw reward column that says whether a sample is correct.
        success_threshold: a sample is correct when that reward exceeds it.
    Returns:
        ``(α·r_tool·rewards [N], {"reward_shaping/otc_tool_reward_mean", "reward_shaping/otc_optimal_calls_mean"})``.
    """
    if mode not in ("grpo", "ppo") or not alpha > 0 or not smoothing > 0:
        raise ValueError(f"need mode 'grpo' or 'ppo', alpha > 0 and smoothing > 0, got mode={mode!r}, "
                         f"alpha={alpha!r}, smoothing={smoothing!r}")  # fmt: skip
    rewards = check_float_tensor(rewards, "rewards", "[N]")
    calls = batch.require("tool_calls", "reward shaper 'otc'").to(rewards.device)  # [N]
    table = batch.require("rewards", "reward shaper 'otc'").to(rewards.device)  # [N, K]
    if not -table.shape[1] <= success_column < table.shape[1]:
        raise ValueError(f"otc: success_column={success_column} is not one of the {table.shape[1]} rewards (0-based)")
    column = table[:, success_column]  # [N]
    correct = ~torch.isnan(column) & (column > success_threshold)  # [N]
    optimal = optimal_calls(calls, correct, batch.group_ids) if mode == "grpo" else torch.zeros_like(rewards)
    weight = alpha * tool_reward(calls, optimal, smoothing=smoothing)  # [N]
    stats = {"reward_shaping/otc_tool_reward_mean": float(weight.mean() / alpha),
             "reward_shaping/otc_optimal_calls_mean": float(optimal.double().mean())}  # fmt: skip
    return rewards * weight.to(rewards.dtype), stats
