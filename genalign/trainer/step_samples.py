"""The samples of one step: the first rollout's rewards, the extra sampling rounds and forced samples the sample
sources ask for, and their decision over which samples form the groups and which enter the loss.

Round 0 is the step's rollout. After each round the stage sees every sample so far (:meth:`SampleSourceStage.observe`)
and may ask for more samples of some prompts (adaptive budgets); each process samples the prompts it owns, as rows
repeated once per extra sample, with the guidance the rules gave for that round. After the last round the rules may
add samples without sampling them (replayed completions with their behaviour log-probs, reference solutions scored by
the current policy, given starts the policy continues, starts the teacher continues); each is built by
:meth:`Policy.force` on the process that owns its prompt, after the teacher (``algorithm.teacher``) has written its part
of the samples it writes. Every part's rewards are computed like the first's, and the parts are joined with
:meth:`Rollout.cat` in the order sampled; the rules' per-sample ``source`` signals join the rollout's structure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Protocol

import torch
from torch import Tensor

from genalign.config import TrainConfig
from genalign.policies.base import Policy, Rollout, RolloutRequest
from genalign.sampling import Forced, LocalSamples, SampleChoice, SampleSourceStage
from genalign.teachers.stage import TeacherStage
from genalign.trainer.parallel import DataParallel
from genalign.trainer.rewards import RewardSet


class TrainingRun(Protocol):
    """What sample collection reads of :class:`genalign.trainer.recipe.TrainingRun`."""

    config: TrainConfig
    policy: Policy
    rewards: RewardSet
    sources: SampleSourceStage
    parallel: DataParallel
    teacher: TeacherStage | None


@dataclass
class StepSamples:
    """This process's samples of one step with their rewards and the sample sources' decision.

    Attributes:
        rollout: ``[n]`` samples (every round, then the forced ones); ``group_ids`` are stream positions.
        reward_table: ``[n, K]`` rewards (NaN = not applied); reward_errors: ``[K]`` failed reward calls.
        forced: ``[n]`` bool, added without sampling.
        choice: the samples that form the groups / enter the loss, and the stage's statistics.
    """

    rollout: Rollout
    reward_table: Tensor
    reward_errors: list[int]
    forced: Tensor
    choice: SampleChoice


def collect_samples(run: TrainingRun, step: int, rollout: Rollout, request: RolloutRequest) -> StepSamples:
    """Rewards of ``rollout`` (this process's round-0 samples), then the extra rounds and forced samples the sample
    sources ask for, and their decision."""
    stage, progress = run.sources, step / run.config.run.max_steps
    table, errors = _rewards(run, rollout)
    forced = torch.zeros(len(rollout), dtype=torch.bool)
    if not stage.rules:
        return StepSamples(rollout, table, errors, forced, SampleChoice(None, None))
    owned = set(rollout.group_ids.tolist())
    round_ = 0
    while True:  # ends: more_samples asks for nothing once round + 1 reaches stage.rounds
        outcome = stage.observe(_local(run, rollout, table, forced), step=step, progress=progress, round=round_)
        wanted = stage.more_samples(outcome)  # the same on every process
        if not wanted:
            break
        positions = [p for p, count in sorted(wanted.items()) if p in owned for _ in range(count)]
        extra = _sample_rows(run, positions, request)  # every process enters, also with nothing to sample
        if extra is not None:
            rollout, table, forced, errors = _join(run, (rollout, table, forced, errors), extra, False)
        round_ += 1
    if stage.forces:
        added = [item for item in stage.forced_samples(outcome) if item.position in owned]
        extra = _force(run, added, request)  # every process enters, also with nothing to add
        if extra is not None:
            rollout, table, forced, errors = _join(run, (rollout, table, forced, errors), extra, True)
        outcome = stage.observe(_local(run, rollout, table, forced), step=step, progress=progress, round=round_)
    choice = stage.decide(outcome)
    rollout.add_structure(**choice.signals)  # the rules' per-sample signals (producer ``source``)
    return StepSamples(rollout, table, errors, forced, choice)


def _join(run: TrainingRun, so_far: tuple[Rollout, Tensor, Tensor, list[int]], extra: Rollout, forced: bool):
    """``so_far`` (rollout, reward table, forced flags, reward errors) followed by ``extra`` with its rewards."""
    rollout, table, flags, errors = so_far
    extra_table, extra_errors = _rewards(run, extra)
    return (
        Rollout.cat([rollout, extra]),
        torch.cat([table, extra_table]),
        torch.cat([flags, torch.full((len(extra),), forced, dtype=torch.bool)]),
        [a + b for a, b in zip(errors, extra_errors, strict=True)],
    )


def _rewards(run: TrainingRun, rollout: Rollout) -> tuple[Tensor, list[int]]:
    lengths = rollout.action_mask.sum(1).long().tolist()
    table, errors = run.rewards(rollout.rows, rollout.outputs, completion_length=lengths, **rollout.output_columns())
    return table, list(errors)


def _local(run: TrainingRun, rollout: Rollout, table: Tensor, forced: Tensor) -> LocalSamples:
    return run.sources.view(rollout, run.rewards.table_sum(table), forced)


def _sample_rows(run: TrainingRun, positions: list[int], request: RolloutRequest) -> Rollout | None:
    """One sample per entry of ``positions`` (stream positions of this step, repeated per extra sample); None when
    this process has none. Every process enters the full-parameter context (sharded training gathers there)."""
    rows = [run.sources.sampling_row(p) for p in positions]
    with run.parallel.full_parameters():
        extra = run.policy.rollout(rows, 1, request=request) if rows else None
    if extra is not None:
        extra.group_ids = torch.tensor(positions, dtype=torch.long)[extra.group_ids]
    return extra


def _force(run: TrainingRun, added: list[Forced], request: RolloutRequest) -> Rollout | None:
    """The forced samples of this process's prompts as one rollout (:meth:`Policy.force`); None when none. The
    teacher first writes after the starts of the samples it writes (:func:`_teacher_written`)."""
    rows = [run.sources.candidate(item.position).row for item in added]
    with run.parallel.full_parameters():  # (a self-teacher runs the policy's modules)
        added = _teacher_written(run, rows, added) if run.sources.teacher_writes else added
        completions = [item.tokens if item.tokens is not None else item.text for item in added]
        logps = [item.behaviour_logp for item in added]
        continues = [item.continues for item in added]
        extra = run.policy.force(rows, completions, logps, request=request, continues=continues) if rows else None
    if extra is not None:
        extra.group_ids = torch.tensor([item.position for item in added], dtype=torch.long)[extra.group_ids]
    return extra


def _teacher_written(run: TrainingRun, rows: list[dict], added: list[Forced]) -> list[Forced]:
    """``added`` with each sample flagged ``teacher_writes`` extended by the teacher's continuation of its start (one
    :meth:`TeacherStage.write` call, inside the caller's full-parameter context):
    the start's behaviour log-probs (NaN where none were given: scored by the current policy) followed by the
    teacher's sampling log-probs, then continued by the policy where ``continues``."""
    writes = [k for k, item in enumerate(added) if item.teacher_writes]
    if not writes:
        return added
    assert run.teacher is not None, "config load refuses teacher_writes without algorithm.teacher"
    starts = [added[k].tokens.tolist() for k in writes]
    written = run.teacher.write([rows[k] for k in writes], starts, [added[k].teacher_tokens for k in writes])
    added = list(added)
    for k, start, (ids, logp) in zip(writes, starts, written, strict=True):
        item = added[k]
        given = item.behaviour_logp if item.behaviour_logp is not None else torch.full((len(start),), math.nan)
        added[k] = replace(item, tokens=torch.tensor(start + ids, dtype=torch.long),
                           behaviour_logp=torch.cat([given[: len(start)].float(), logp]),
                           teacher_writes=False, teacher_tokens=None)  # fmt: skip
    return added
