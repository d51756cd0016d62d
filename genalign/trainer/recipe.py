"""The group-relative training recipe, top to bottom, for every model family.

One step: take prompts → ``policy.rollout`` (G samples each, with the structure the method needs) → rewards → the
teacher's judgements (``algorithm.teacher``, optional) → advantages over the global batch → credit rules → μ epochs ×
minibatches × micro-batches of ``policy.score`` + the configured objective + global-normaliser aggregation → metrics,
samples, evaluation, checkpoint. Model families differ only inside the policy (shared/ARCHITECTURE.md); the trainer
calls only the stages declared by :class:`genalign.policies.base.Policy`.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from genalign import algorithms as alg
from genalign.config import TrainConfig, to_dict
from genalign.config.paths import saved_run_config
from genalign.data import load_rows
from genalign.policies import load_family
from genalign.policies.base import Policy, Rollout, RolloutRequest
from genalign.sampling import SampleSourceStage, build_rules
from genalign.sampling.prompt_stream import PromptStream
from genalign.teachers.stage import TeacherStage
from genalign.trainer.async_rollout import AsyncRollout
from genalign.trainer.checkpoint import (
    CheckpointError,
    checkpoint_config,
    find_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from genalign.trainer.dashboard import dashboard_enabled, refresh_dashboard
from genalign.trainer.disk_errors import HeldBack, describe_disk_error, explained_disk_errors
from genalign.trainer.disk_space import is_disk_error
from genalign.trainer.distributed import (
    all_gather_cat,
    all_true,
    join_launched_processes,
    rank_and_world,
    sum_counters,
)
from genalign.trainer.evaluate import evaluate
from genalign.trainer.guards import CollapseMonitor, NonFiniteTrainingError, all_finite, optimizer_state_tensors
from genalign.trainer.inputs import ConfigLike, RewardLike, SuppliedRows, prepare
from genalign.trainer.metrics import (
    EVAL_FILE,
    METRICS_FILE,
    JsonlLog,
    dump_samples,
    progress_bar,
    report_progress,
    step_record,
)
from genalign.trainer.optim import build_optimizer, named_trainable_parameters
from genalign.trainer.parallel import DataParallel, resolve_mixed_precision, resolve_strategy
from genalign.trainer.rewards import RewardSet, prompt_text
from genalign.trainer.run_directory import (
    RunDirectoryError,
    check_resume_compatible,
    check_steps_left,
    claim_output_dir,
    remove_leftovers,
)
from genalign.trainer.run_lock import hold_run_directory, record_holder, release_run_directory, released_at_exit
from genalign.trainer.shutdown import StopSignals, agree_to_stop, interrupted
from genalign.trainer.step_batch import build_step_batch
from genalign.trainer.step_samples import StepSamples, collect_samples
from genalign.trainer.torch_settings import apply_torch_settings
from genalign.trainer.trackers import Trackers
from genalign.trainer.update import run_update
from genalign.trainer.validation_anchor import ValidationAnchor


def seed_step(seed: int, step: int, rank: int) -> None:
    """Make the randomness of step ``step`` on ``rank`` a pure function of its arguments (exact resume)."""
    value = (seed * 1_000_003 + step * 9_973 + rank * 101) % (2**31)
    torch.manual_seed(value)
    random.seed(value)
    np.random.seed(value)


def build_policy(config: TrainConfig, device: torch.device) -> Policy:
    return load_family(config.policy.family).build_policy(config.policy, device)


@dataclass
class TrainingRun:
    """The components of one run, built by :func:`start_run`."""

    config: TrainConfig
    accelerator: Any
    rank: int
    world: int
    out: Path
    policy: Policy
    rewards: RewardSet
    stream: PromptStream
    sources: SampleSourceStage
    eval_rows: list[dict[str, Any]]
    optimizer: torch.optim.Optimizer
    scheduler: Any
    named_parameters: list[tuple[str, torch.nn.Parameter]]
    parallel: DataParallel
    stage: alg.AdvantageStage  # combiner, shapers, estimator and credit rules, bound once
    loss: alg.LossPlan  # objective, KL, regulariser, entropy bonus and aggregation, bound once
    metrics_log: JsonlLog
    eval_log: JsonlLog
    trackers: Trackers
    collapse: CollapseMonitor = field(default_factory=CollapseMonitor)
    rollouts: AsyncRollout | None = None  # algorithm.async_rollout: the rollout process and its schedule
    teacher: TeacherStage | None = None  # algorithm.teacher: judges the samples before their advantages
    anchor: ValidationAnchor | None = None  # eval.reset_to_best_every: VAPR's reset to the best evaluation [18]
    skipped_in_a_row: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    def print(self, message: str) -> None:
        """Print on the main process only."""
        if self.main:
            print(message, flush=True)

    @property
    def parameters(self) -> list[torch.nn.Parameter]:
        return [param for _, param in self.named_parameters]

    def components(self) -> dict[str, alg.Stateful]:
        """Every stateful component besides the policy, optimizer and data position, by checkpoint key: stateful
        options (an estimator or combiner that reads earlier steps, ...), the sample sources, the asynchronous
        rollout schedule. Saved and restored in one place (:func:`state_of`, :func:`resume`)."""
        parts: dict[str, alg.Stateful] = dict(self.stage.stateful())
        if self.sources.rules:
            parts["sample_sources"] = self.sources
        if self.rollouts is not None:
            parts["async_rollout"] = self.rollouts
        if self.anchor is not None:
            parts["validation_anchor"] = self.anchor
        return parts


def train(
    config: ConfigLike,
    *,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    rewards: Sequence[RewardLike] | None = None,
) -> dict[str, Any]:
    """Run training as configured; return the final evaluation (or last metrics when there is no eval data).

    One trainer writes a run directory (a lock held for the run: :mod:`genalign.trainer.run_lock`). SIGTERM and SIGINT
    stop the run after the current step with a checkpoint of it and raise
    :class:`~genalign.trainer.shutdown.TrainingInterrupted` (a second signal stops at once); a full or read-only disk
    raises :class:`~genalign.trainer.disk_space.StorageError`. Every process of a run takes these decisions alike.

    Args:
        config: a :class:`TrainConfig`, a dict of the YAML form or the path of a YAML file; it may leave out the data
            and rewards given here (validated once with them: :func:`genalign.trainer.inputs.prepare`).
        train_dataset, eval_dataset: rows instead of ``data.train`` / ``data.eval``: a ``datasets.Dataset`` or
            ``IterableDataset``, a list of row dicts or any iterable of them, each with a ``prompt`` (a string or a
            list of chat messages) and the columns the rewards read (:mod:`genalign.data.in_memory`).
        rewards: rewards instead of ``config.rewards``: callables ``f(prompts, completions, **columns) ->
            list[float | None]`` (weight 1 each, named after the function), registered names, RewardSpecs.
    """
    supplied = SuppliedRows()
    if not isinstance(config, TrainConfig) or any(x is not None for x in (train_dataset, eval_dataset, rewards)):
        config, supplied = prepare(config, train_dataset=train_dataset, eval_dataset=eval_dataset, rewards=rewards)
    out = config.run.output_dir
    with StopSignals() as signals, released_at_exit(out), explained_disk_errors(out):
        run, start_step = start_run(config, supplied)
        if start_step == 0 and config.eval.at_start:
            run_eval(run, 0)
        progress = progress_bar(config.run, start_step, run.main)
        started, last_eval, step = time.monotonic(), {}, start_step
        with run.rollouts or contextlib.nullcontext():  # stops the rollout process (async mode) however the loop ends
            for step in range(start_step + 1, config.run.max_steps + 1):
                record, rollout, batch = training_step(run, step)
                stop = guard_step(run, step, record)
                with HeldBack() as write_error:  # a full disk stops every process, after the agreement below
                    log_step(run, step, record, rollout, batch, progress)
                if stop is not None:
                    raise stop
                if config.eval.every and step % config.eval.every == 0 and step < config.run.max_steps:
                    with write_error:
                        last_eval = run_eval(run, step)
                limit = config.run.max_time_minutes
                out_of_time = limit is not None and time.monotonic() - started > 60 * limit
                # one collective per step: every process stops after the same step, for the same reason
                decision = agree_to_stop(out_of_time=out_of_time, signals=signals, failed=write_error.error is not None)
                if decision.failed:
                    write_error.raise_for(run.out, step)
                save_every = config.run.save_every
                due = (save_every and step % save_every == 0) or step == config.run.max_steps
                saved = checkpoint(run, step) if due or decision.out_of_time or decision.signal_name else None
                if decision.signal_name and step < config.run.max_steps:  # (at the last step the run just ends)
                    if progress is not None:
                        progress.close()
                    run.trackers.end()
                    newest = list_checkpoints(run.out)
                    raise interrupted(decision.signal_name, step, saved, newest[-1] if newest else None)
                if decision.out_of_time:  # checkpointed just above
                    run.print(f"run.max_time_minutes = {limit} reached after step {step}")
                    break
        if progress is not None:
            progress.close()
        return finish(run, step, last_eval)


def start_run(config: TrainConfig, supplied: SuppliedRows | None = None) -> tuple[TrainingRun, int]:
    """Everything that can fail runs before anything is written: the main process takes the run directory's lock
    (another trainer on it is an error naming its PID and host), claims the output folder (a previous run there is an
    error unless resumed or moved aside) and removes this run's leftovers; the data, rewards, policy and optimizer are
    built, a resume checkpoint is found, verified and checked against this config. Then the folder, ``config.yaml``
    and the logs are written. The lock is held until :func:`train` ends (or this process does). Returns the run and
    the step it starts after. ``supplied``: rows passed from Python instead of the config's sources."""
    from accelerate import Accelerator

    run_cfg, cfg = config.run, config.algorithm
    apply_torch_settings(run_cfg.num_threads, run_cfg.deterministic)
    join_launched_processes(run_cfg.cpu)
    accelerator = Accelerator(
        cpu=run_cfg.cpu,
        mixed_precision=resolve_mixed_precision(run_cfg.mixed_precision),
        log_with=run_cfg.trackers or None,
        project_dir=run_cfg.output_dir,
    )
    rank, world = rank_and_world()
    if cfg.prompts_per_step % world:
        raise ValueError(
            f"algorithm.prompts_per_step = {cfg.prompts_per_step} must be divisible by the number of processes ({world})."
        )
    out = Path(run_cfg.output_dir)
    refusal: Exception | None = None
    if rank == 0:
        try:
            hold_run_directory(out)  # before the check below, so that two starts cannot both pass it
            if not run_cfg.overwrite:
                claim_output_dir(out, resume=run_cfg.resume, overwrite=False)  # fail before loading anything
            remove_leftovers(out)  # before anything is written: a full disk may be full of them
            record_holder(out)  # the PID and host a refused trainer names, if a full disk kept the lock from them
        except Exception as err:
            release_run_directory(out)
            refusal = err
    if not all_true(refusal is None):  # the other processes stop too when the main one may not start
        raise refusal or RunDirectoryError(f"the main process may not start in {out}; see its message.")
    try:
        run = _build_run(config, accelerator, rank, world, out, supplied or SuppliedRows())
        try:
            start_step = resume(run) if run_cfg.resume else 0
        except (TypeError, KeyError, IndexError, AttributeError) as err:  # extras of a malformed trainer state
            raise CheckpointError(
                f"run.resume={run_cfg.resume!r}: the checkpoint's trainer_state.json holds no state this run can "
                f"restore ({type(err).__name__}: {err})"
            ) from None
        if run.main:
            moved = claim_output_dir(out, resume=run_cfg.resume, overwrite=run_cfg.overwrite)
            if moved is not None:
                run.print(f"run.overwrite: the previous run in {out} was moved to {moved}")
            out.mkdir(parents=True, exist_ok=True)
            saved = saved_run_config(config, in_checkpoint=False)  # portable: genalign.config.paths
            (out / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
            run.trackers.start(to_dict(config))
    except BaseException:
        release_run_directory(out)
        raise
    return run, start_step


def _build_run(
    config: TrainConfig, accelerator: Any, rank: int, world: int, out: Path, supplied: SuppliedRows
) -> TrainingRun:
    """The components: data first (cheap to check), then rewards, policy, optimizer, estimator statistics and the
    teacher (a teacher model is loaded and its tokenizer checked here, before anything is written)."""
    run_cfg, cfg = config.run, config.algorithm
    train_rows = supplied.train if supplied.train is not None else load_rows(config.data.train)
    eval_rows = (
        supplied.eval if supplied.eval is not None else (load_rows(config.data.eval) if config.data.eval else [])
    )
    eval_rows = eval_rows[: config.eval.num_prompts]
    rewards = RewardSet(config.rewards)
    torch.manual_seed(run_cfg.seed)
    policy = build_policy(config, accelerator.device)
    parallel = DataParallel.build(
        policy, resolve_strategy(run_cfg.distributed, world), run_cfg.fsdp, torch.device(accelerator.device)
    )
    named_parameters = named_trainable_parameters(policy)
    optimizer, scheduler = build_optimizer(
        named_parameters, config.optim, total_steps=run_cfg.max_steps * cfg.optimizer_steps_per_update()
    )
    sources = SampleSourceStage(build_rules(cfg.sample_sources), seed=run_cfg.seed, group_size=cfg.group_size,
                                rank=rank, gather=all_gather_cat)  # fmt: skip
    return TrainingRun(
        config=config,
        accelerator=accelerator,
        rank=rank,
        world=world,
        out=out,
        policy=policy,
        rewards=rewards,
        stream=PromptStream(train_rows, seed=run_cfg.seed),
        sources=sources,
        eval_rows=eval_rows,
        optimizer=optimizer,
        scheduler=scheduler,
        named_parameters=named_parameters,
        parallel=parallel,
        stage=cfg.advantage_stage(),
        loss=cfg.loss_plan(),
        metrics_log=JsonlLog(out / METRICS_FILE),
        eval_log=JsonlLog(out / EVAL_FILE),
        trackers=Trackers(accelerator, run_cfg.trackers if rank == 0 else []),
        rollouts=AsyncRollout(seed_step) if cfg.async_rollout.enabled else None,
        teacher=TeacherStage.build(
            cfg.teacher, cfg.needs(), policy, batch_size=cfg.micro_batch_size, writes=sources.teacher_writes
        ),
        anchor=_validation_anchor(config, policy, named_parameters, eval_rows),
    )


def _validation_anchor(config: TrainConfig, policy: Policy, named_parameters, eval_rows) -> ValidationAnchor | None:
    """VAPR's anchor [18] when ``eval.reset_to_best_every`` is set (it needs held-out rows to choose by)."""
    every = config.eval.reset_to_best_every
    if not every:
        return None
    if not eval_rows:
        raise ValueError(f"eval.reset_to_best_every = {every} needs held-out rows (data.eval or eval_dataset) to "
                         "choose the best weights by.")  # fmt: skip
    return ValidationAnchor(policy, named_parameters, every)


def resume(run: TrainingRun) -> int:
    """Restore the checkpoint named by ``run.resume`` (the newest one that verifies, for ``latest``) after checking
    that it belongs to this run; return its step."""
    run_cfg = run.config.run
    found = find_checkpoint(run.out, run_cfg.resume)
    for path, reason in found.skipped:
        run.print(f"resume: skipped {path} ({reason})")
    current = saved_run_config(run.config, in_checkpoint=True)
    check_resume_compatible(checkpoint_config(found.path), current, allowed=run_cfg.resume_changes)
    state = load_checkpoint(
        found.path, run.policy, run.optimizer, run.scheduler,
        named_parameters=run.named_parameters, allow_pickle=run_cfg.allow_pickle_checkpoints,
    )  # fmt: skip
    check_steps_left(state["step"], run_cfg.max_steps)
    run.stream.cursor = state["data_cursor"]
    saved = component_states(state["extra"])
    for key, component in run.components().items():
        if key in saved:
            component.load_state_dict(saved[key])
        else:  # a checkpoint written before this component's state was carried: it starts afresh
            run.print(f"resume: the checkpoint holds no state for {key}; it starts from its initial state")
    if run.main:
        run.metrics_log.truncate_after(state["step"])
        run.eval_log.truncate_after(state["step"])
    run.print(f"resumed from {found.path} at step {state['step']}")
    return state["step"]


def checkpoint(run: TrainingRun, step: int) -> Path | None:
    """Save a checkpoint (every process writes its shards) and return it, unless the weights or the optimizer state
    hold NaN/inf (then keep the previous ones and return None). A full or read-only disk raises a
    :class:`~genalign.trainer.disk_space.StorageError` on every process (the partial checkpoint is removed)."""
    if not all_finite(run.parameters) or not all_finite(optimizer_state_tensors(run.optimizer)):
        run.print(f"step {step}: not saving a checkpoint: the weights or the optimizer state hold NaN/inf")
        return None
    config = saved_run_config(run.config, in_checkpoint=True)
    try:
        return save_checkpoint(
            run.out, step, run.policy, run.optimizer, run.scheduler, state_of(run), run.config.run.keep_last, config,
            named_parameters=run.named_parameters, consolidated=run.parallel.consolidated,
        )  # fmt: skip
    except OSError as err:
        if not is_disk_error(err):
            raise
        raise describe_disk_error(err, run.out, f"step {step}: writing checkpoint step-{step}") from err


def guard_step(run: TrainingRun, step: int, record: dict[str, Any]) -> NonFiniteTrainingError | None:
    """Count steps whose every update was skipped for non-finite values and return the error that stops the run after
    ``run.max_consecutive_skips`` of them; print collapse warnings."""
    reason = record.pop("guard/skip_reason", "")
    run.skipped_in_a_row = run.skipped_in_a_row + 1 if reason and record["guard/optimizer_steps"] == 0 else 0
    if reason:
        skipped = int(record["guard/skipped_optimizer_steps"])
        run.print(f"step {step}: skipped {skipped} update(s): {reason}")
    if run.skipped_in_a_row >= run.config.run.max_consecutive_skips:
        newest = list_checkpoints(run.out)
        saved = f"the newest checkpoint, {newest[-1]}, holds finite weights" if newest else "no checkpoint was written"
        return NonFiniteTrainingError(
            f"step {step}: the last {run.skipped_in_a_row} steps skipped every update because {reason}. The run stops "
            f"(run.max_consecutive_skips = {run.config.run.max_consecutive_skips}); {saved}. Lower optim.lr, check "
            "the rewards, or resume from an earlier checkpoint."
        )
    for message in run.collapse.check(step, record, run.parameters):
        run.print(message)
    return None


def training_step(run: TrainingRun, step: int) -> tuple[dict[str, Any], Rollout, alg.StepBatch]:
    """One step: this process's rollout (:func:`sample_step`), then rewards, advantages, credit and the update
    (:func:`learn_from_samples`). Returns the step's metrics record, the rollout and its advantages. In async mode
    the rollout process samples the next steps now, and this step's rollout was sampled ahead (async_rollout.py)."""
    if run.rollouts is not None:
        run.rollouts.send_ahead(run, step)
    seed_step(run.config.run.seed, step, run.rank)
    run.policy.on_step(step)
    t0 = time.perf_counter()
    rollout = sample_step(run, step) if run.rollouts is None else run.rollouts.receive(step)
    worker_seconds = rollout.info.pop("worker_seconds", None)  # a timing: logged under time/, not rollout/
    samples = collect_samples(run, step, rollout, rollout_request(run))
    record, rollout, batch = learn_from_samples(run, step, samples, sampling_seconds=time.perf_counter() - t0)
    if worker_seconds is not None:
        record["time/rollout_worker_s"] = worker_seconds
    return record, rollout, batch


def sample_step(run: TrainingRun, step: int) -> Rollout:
    """This process's share of the step's prompts, chosen by the sample-source stage (G samples each unless a rule
    asks for more), with the structure the method needs; group ids are the prompts' positions in the stream (unique
    over processes and steps)."""
    sampled = run.config.algorithm.prompts_to_sample()
    sampled += -sampled % run.world  # every process samples the same number of prompts
    local_sampled = sampled // run.world
    plan = run.sources.plan(run.stream, sampled, step)  # the same on every process
    taken = plan.prompts[run.rank * local_sampled : (run.rank + 1) * local_sampled]
    stream_ids = torch.tensor([prompt.position for prompt in taken])
    with run.parallel.full_parameters():
        rows = [prompt.row for prompt in taken]
        rollout = run.policy.rollout(rows, plan.samples_per_prompt, request=rollout_request(run))
    if run.parallel.sharded and len(rollout) == 0:
        raise RuntimeError(
            f"step {step}: process {run.rank} has no sample to train on (every prompt was skipped), but sharded "
            "training needs every process in every pass; raise policy.max_prompt_tokens or fix the data."
        )
    rollout.group_ids = stream_ids[rollout.group_ids]
    return rollout


def learn_from_samples(
    run: TrainingRun, step: int, samples: StepSamples, *, sampling_seconds: float
) -> tuple[dict[str, Any], Rollout, alg.StepBatch]:
    """Advantages over the global batch, credit, the optional group filter and the update of one step's samples
    (this process's share, with their rewards and the sample sources' decision); returns the step's metrics record,
    the rollout and its step batch. ``sampling_seconds``: the rollout, its extra rounds and the rewards."""
    config, cfg = run.config, run.config.algorithm
    t0 = time.perf_counter()
    rollout, reward_table, chosen = samples.rollout, samples.reward_table, samples.choice
    if chosen.keep is not None:  # e.g. GFPO: the filtered subset forms the groups
        rollout, reward_table = rollout.select(chosen.keep), reward_table[chosen.keep]

    # Advantages over the global batch, then per-action credit and the old log-probs; optional zero-variance filter.
    batch, stats = build_step_batch(
        run.policy, rollout, reward_table, run.rewards.weights, run.stage, run.loss, step / config.run.max_steps,
        micro_batch_size=cfg.micro_batch_size, on_policy=cfg.fully_on_policy, asynchronous=cfg.async_rollout.enabled,
        lockstep=run.parallel.sharded, teacher=run.teacher,
    )  # fmt: skip
    keep = alg.informative_groups(
        rollout.group_ids, batch["reward_zero_std"],
        drop_zero_std=cfg.drop_zero_std_groups or cfg.dynamic_sampling.enabled,
        max_groups=cfg.prompts_per_step // run.world if cfg.dynamic_sampling.enabled else None,
    )  # fmt: skip
    if chosen.train is not None:  # e.g. overlong filtering: in the group statistics, out of the loss
        keep = keep[chosen.train[keep]]
    trained = len(keep) < len(rollout)
    t1 = time.perf_counter()

    update_metrics = run_update(
        run.policy, rollout.select(keep) if trained else rollout, batch.select(keep) if trained else batch, run.loss,
        cfg, run.optimizer, run.scheduler, run.parameters, config.optim.max_grad_norm, run.accelerator.autocast,
        padding=rollout.select([0]) if run.parallel.sharded else None,
    )  # fmt: skip
    t_update = time.perf_counter() - t1

    record = step_record(step, rollout, reward_table, samples.reward_errors, run.rewards.labels, stats, update_metrics)
    record["num_trained_samples"] = len(keep)
    record |= chosen.stats
    record |= sum_counters(run.rewards.take_metrics())
    if run.teacher is not None:
        record |= run.teacher.take_metrics(sum_counters)
    step_seconds = sampling_seconds + time.perf_counter() - t0
    record |= {"time/rollout_s": sampling_seconds, "time/update_s": t_update, "time/step_s": step_seconds}
    return record, rollout, batch


def rollout_request(run: TrainingRun) -> RolloutRequest:
    """The rollout structure the configured methods read, and the trainer's reward probe for families whose rollouts
    measure rewards (of intermediate states, or to choose initial noise)."""
    structure = alg.names_by("rollout", run.config.algorithm.needs())
    return RolloutRequest(structure=structure, reward_probe=run.rewards.weighted_sum)


def log_step(run: TrainingRun, step: int, record: dict[str, Any], rollout: Rollout, batch: alg.StepBatch, progress):
    """Append the record to ``metrics.jsonl`` and the trackers, dump samples, report progress (main process)."""
    if not run.main:
        return
    run_cfg = run.config.run
    run.metrics_log.append(record)
    run.trackers.log(record, step)
    if run_cfg.sample_every and step % run_cfg.sample_every == 0:
        prompts, rewards, count = (
            [prompt_text(r) for r in rollout.rows],
            batch["combined_reward"].tolist(),
            run_cfg.samples_per_dump,
        )
        fps = rollout.info.get("fps")  # declared by a policy whose outputs are videos
        dump_samples(run.out / "samples", step, prompts, rollout.outputs, rewards, count, fps=fps)
        run.trackers.samples(step, prompts[:count], rollout.outputs[:count], rewards[:count], fps=fps)
    report_progress(progress, record, step, run_cfg.log_every)


def run_eval(run: TrainingRun, step: int) -> dict[str, Any]:
    """Held-out evaluation (every process samples its share), appended to ``eval.jsonl`` by the main process."""
    if not run.eval_rows:
        return {}
    eval_cfg = run.config.eval
    result = {"step": step, **evaluate(run.policy, run.eval_rows, run.rewards, batch_size=eval_cfg.batch_size,
                                       accuracy_reward=eval_cfg.accuracy_reward,
                                       full_parameters=run.parallel.full_parameters,
                                       seed=eval_cfg.seed)}  # fmt: skip
    if run.main:
        run.eval_log.append(result)
        run.trackers.log(result, step)
        label = run.rewards.name_of(eval_cfg.accuracy_reward)
        run.print(f"step {step}: held-out {label} {result['eval/accuracy']:.3f} on {len(run.eval_rows)} prompts")
        if dashboard_enabled(run.config.run.dashboard):
            refresh_dashboard(run.out)
    if run.anchor is not None:  # every process alike (the evaluation's result is global)
        reset = run.anchor.after_evaluation(step, result, may_reset=step < run.config.run.max_steps)
        if reset:
            run.print(reset)
    return result


def finish(run: TrainingRun, step: int, last_eval: dict[str, Any]) -> dict[str, Any]:
    """Final evaluation, ``eval.json`` and the dashboard; returns the final evaluation (or last metrics)."""
    last_eval = run_eval(run, step) if run.eval_rows else last_eval
    if run.main:
        if last_eval:
            (run.out / "eval.json").write_text(json.dumps(last_eval, indent=2))
        if not run.eval_rows and dashboard_enabled(run.config.run.dashboard):  # (an evaluation has just redrawn it)
            refresh_dashboard(run.out)
    run.trackers.end()
    return last_eval or (run.metrics_log.read()[-1] if run.main and run.metrics_log.read() else {})


def state_of(run: TrainingRun) -> dict[str, Any]:
    """What a checkpoint needs beyond weights, optimizer and policy state: the data position and the state of every
    stateful component (:meth:`TrainingRun.components`)."""
    components = {key: component.state_dict() for key, component in run.components().items()}
    return {"data_cursor": run.stream.cursor, "extra": {"components": components}}


#: Checkpoint keys of component states written before they were kept under ``extra["components"]``.
_LEGACY_KEYS = {"advantage_state": "advantage", "combiner_state": "reward_combination",
                "sample_sources": "sample_sources", "async_rollout": "async_rollout"}  # fmt: skip


def component_states(extra: dict[str, Any]) -> dict[str, Any]:
    """The saved component states by key, also from checkpoints of earlier versions (one key per component)."""
    states = dict(extra.get("components", {}))
    for legacy, key in _LEGACY_KEYS.items():
        if legacy in extra and key not in states:
            states[key] = extra[legacy]
    return states
