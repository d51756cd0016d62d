"""One step's :class:`~genalign.algorithms.batch.StepBatch`: the rollout's signals, the teacher's judgements (with
``algorithm.teacher``), a scoring pass before the update when the methods need one, the advantages over the GLOBAL
batch (all processes) sliced back per process, per-action credit and the old log-probs (:func:`build_step_batch`).

The trainer moves signals by name and names none but the core ones (mask, groups, log-probs, rewards, advantages):
which features the scoring pass computes and which signals the advantage stage gathers are the stage's declared needs.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign import algorithms as alg
from genalign.algorithms.signals import signal
from genalign.policies.base import Policy, Rollout, ScoreOutput, ScoreRequest
from genalign.teachers.base import same_count
from genalign.teachers.stage import TeacherStage
from genalign.trainer.distributed import all_gather_cat, all_reduce_max, rank_and_world
from genalign.trainer.update import score_without_grad


def rollout_batch(rollout: Rollout, reward_table: Tensor, progress: float) -> alg.StepBatch:
    """The step signals a rollout carries: ``mask``, ``group_ids``, ``behaviour_logp``, its structure, the raw
    ``rewards`` ``[n, K]`` and ``progress``."""
    return alg.StepBatch(
        rollout.structure,
        mask=rollout.action_mask,
        group_ids=rollout.group_ids,
        behaviour_logp=rollout.old_logp,
        rewards=reward_table,
        progress=progress,
    )


def needs_rescored_old_logp(plan: alg.LossPlan, policy: Policy, *, on_policy: bool, asynchronous: bool) -> bool:
    """The old log-probs must come from a scoring pass before the update: the objective reads them, the update takes
    more than one optimizer step per rollout, and the sampler's log-probs are not the current weights' (they are not
    exact, or, with asynchronous rollouts, they are exact but a stale behaviour policy's: the off-policy clip [323]
    centres its trust region on the current iterate and takes the ratio to the behaviour policy separately)."""
    stale_or_inexact = asynchronous or not policy.capabilities.rollout_logp_is_exact
    return plan.uses_old_logp and not on_policy and stale_or_inexact


def gather_batch(batch: alg.StepBatch, names: frozenset[str]) -> alg.StepBatch:
    """The signals ``names`` of every process's ``batch``, concatenated along the sample axis in rank order, on the
    CPU; per-action signals are zero-padded on the right to the longest action axis of all processes; scalars (such as
    ``progress``) are the same on every process and kept as they are."""
    gathered = {}
    for name in sorted(names):
        value = batch.require(name, "the advantage stage")
        if not signal(name).axes:  # a scalar (progress) is the same on every process
            gathered[name] = value
            continue
        if signal(name).per_action and value.dim() > 1:
            width = all_reduce_max(value.shape[1])
            if width > value.shape[1]:
                value = torch.cat([value, value.new_zeros(value.shape[0], width - value.shape[1], *value.shape[2:])], 1)
        gathered[name] = all_gather_cat(value).cpu()
    return alg.StepBatch(gathered)


def build_step_batch(
    policy: Policy,
    rollout: Rollout,
    reward_table: Tensor,
    reward_weights: Tensor,
    stage: alg.AdvantageStage,
    plan: alg.LossPlan,
    progress: float,
    *,
    micro_batch_size: int,
    on_policy: bool,
    asynchronous: bool = False,
    lockstep: bool = False,
    teacher: TeacherStage | None = None,
) -> tuple[alg.StepBatch, dict[str, float]]:
    """The step batch of one rollout, ready for the update, and the advantage stage's statistics.

    Args:
        reward_table: ``[n, K]`` rewards of the rollout (NaN = not applicable); reward_weights: ``[K]``.
        stage, plan: the run's advantage stage and loss plan.
        progress: ``step / max_steps``.
        micro_batch_size: samples per scoring pass (the update's composition).
        on_policy: the update makes one optimizer step per rollout (old log-probs = the detached current ones).
        asynchronous: the rollout was sampled by a stale policy (asynchronous rollouts).
        lockstep: every process makes the same number of scoring passes (sharded training).
        teacher: the run's teacher stage: its judgements of the samples join the batch before the advantages.
    """
    batch = rollout_batch(rollout, reward_table, progress)
    if teacher is not None:
        passes = all_reduce_max if lockstep else same_count
        judged = teacher.judge(rollout, passes_everywhere=passes, rewards=reward_table)
        batch = batch.with_values(judged)
    rescore_old = needs_rescored_old_logp(plan, policy, on_policy=on_policy, asynchronous=asynchronous)
    request = stage.prepass()
    scored: ScoreOutput | None = None
    if request is not None or rescore_old:
        scored = score_without_grad(policy, rollout, micro_batch_size, request or ScoreRequest(), lockstep=lockstep)
        batch = batch.with_values(scored.features)
    rank, _ = rank_and_world()
    sizes = all_gather_cat(torch.tensor([len(rollout)]))
    local = slice(int(sizes[:rank].sum()), int(sizes[: rank + 1].sum()))
    names = stage.gathered() | {"rewards", "group_ids"}
    values, stats = stage.sample_advantages(gather_batch(batch, names), reward_weights)  # [N] each
    batch = batch.with_values({name: value[local] for name, value in values.items()})
    advantages = stage.credit_advantages(batch)  # [n] or [n, T]
    old_logp = None  # None: the update uses the detached current log-probs (ratio exactly 1)
    if rescore_old:
        old_logp = scored.logp
    elif not on_policy and policy.capabilities.rollout_logp_is_exact:
        old_logp = rollout.old_logp  # synchronous: the sampler's weights are the current ones
    return batch.with_values(advantages=advantages, old_logp=old_logp), stats
