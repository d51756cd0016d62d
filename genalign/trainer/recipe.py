"""The group-relative training recipe, top to bottom, for every model family.

One step: take prompts → ``policy.rollout`` (G samples each) → rewards → advantages over the global batch →
μ epochs × minibatches × micro-batches of ``policy.score`` + shared objective + global-normaliser aggregation →
metrics, samples, evaluation, checkpoint. Model families differ only inside the policy (shared/ARCHITECTURE.md).
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from genalign import algorithms as alg
from genalign.config import TrainConfig, to_dict
from genalign.data import load_rows
from genalign.policies import load_family
from genalign.policies.base import Policy
from genalign.trainer.advantages import update_inputs
from genalign.trainer.checkpoint import find_checkpoint, load_checkpoint, save_checkpoint
from genalign.trainer.data_stream import PromptStream
from genalign.trainer.distributed import all_reduce_sum, rank_and_world
from genalign.trainer.evaluate import evaluate
from genalign.trainer.metrics import EVAL_FILE, METRICS_FILE, JsonlLog, dump_samples, plot_curves
from genalign.trainer.optim import build_optimizer, named_trainable_parameters
from genalign.trainer.rewards import RewardSet, prompt_text
from genalign.trainer.update import run_update


def seed_step(seed: int, step: int, rank: int) -> None:
    """Make the randomness of step ``step`` on ``rank`` a pure function of its arguments (exact resume)."""
    value = (seed * 1_000_003 + step * 9_973 + rank * 101) % (2**31)
    torch.manual_seed(value)
    random.seed(value)
    np.random.seed(value)


def build_policy(config: TrainConfig, device: torch.device) -> Policy:
    return load_family(config.policy.family).build_policy(config.policy, device)


def train(config: TrainConfig) -> dict[str, Any]:
    """Run training as configured; return the final evaluation (or last metrics when there is no eval data)."""
    from accelerate import Accelerator

    run, cfg = config.run, config.algorithm
    if run.num_threads:
        torch.set_num_threads(run.num_threads)
    torch.use_deterministic_algorithms(run.deterministic, warn_only=True)
    accelerator = Accelerator(
        cpu=run.cpu, mixed_precision=run.mixed_precision, log_with=run.trackers or None, project_dir=run.output_dir
    )
    rank, world = rank_and_world()
    if cfg.prompts_per_step % world:
        raise ValueError(
            f"algorithm.prompts_per_step = {cfg.prompts_per_step} must be divisible by the number of processes ({world})."
        )
    out = Path(run.output_dir)
    main = accelerator.is_main_process
    if main:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(yaml.safe_dump(to_dict(config), sort_keys=False))
    torch.manual_seed(run.seed)

    # 1. Components: policy, rewards, data, optimizer.
    policy = build_policy(config, accelerator.device)
    rewards = RewardSet(config.rewards)
    stream = PromptStream(load_rows(config.data.train), seed=run.seed)
    eval_rows = load_rows(config.data.eval)[: config.eval.num_prompts] if config.data.eval else []
    named_parameters = named_trainable_parameters(policy)
    parameters = [param for _, param in named_parameters]
    optimizer, scheduler = build_optimizer(
        named_parameters, config.optim, total_steps=run.max_steps * cfg.inner_epochs * cfg.minibatches
    )
    # Statistics of earlier steps, for the estimators that use them (None for stateless ones).
    advantage_state = alg.make_advantage_state(cfg.advantage)
    metrics_log, eval_log = JsonlLog(out / METRICS_FILE), JsonlLog(out / EVAL_FILE)
    if run.trackers:
        accelerator.init_trackers("genalign", config={"output_dir": run.output_dir})

    # 2. Resume.
    start_step = 0
    if run.resume:
        checkpoint = find_checkpoint(out, run.resume)
        state = load_checkpoint(checkpoint, policy, optimizer, scheduler)
        start_step, stream.cursor = state["step"], state["data_cursor"]
        if advantage_state is not None:
            advantage_state.load_state_dict(state["extra"]["advantage_state"])
        if main:
            metrics_log.truncate_after(start_step)
            eval_log.truncate_after(start_step)
        accelerator.print(f"resumed from {checkpoint} at step {start_step}")

    def run_eval(step: int) -> dict[str, Any]:
        result = {}
        if eval_rows and main:
            result = {"step": step, **evaluate(policy, eval_rows, rewards, batch_size=config.eval.batch_size,
                                               accuracy_reward=config.eval.accuracy_reward)}  # fmt: skip
            eval_log.append(result)
            accelerator.print(
                f"step {step}: held-out accuracy {result['eval/accuracy']:.3f} on {len(eval_rows)} prompts"
            )
        accelerator.wait_for_everyone()
        return result

    if start_step == 0 and config.eval.at_start:
        run_eval(0)

    # 3. Training steps.
    progress = _progress(run, start_step, main)
    started = time.monotonic()
    last_eval: dict[str, Any] = {}
    step = start_step
    sampled_prompts = cfg.prompts_to_sample()
    sampled_prompts += -sampled_prompts % world  # every process samples the same number of prompts
    local_prompts, local_sampled = cfg.prompts_per_step // world, sampled_prompts // world
    for step in range(start_step + 1, run.max_steps + 1):
        seed_step(run.seed, step, rank)
        if hasattr(policy, "set_step"):
            policy.set_step(step)
        t0 = time.perf_counter()

        # 3a. Rollout: this process's share of the step's prompts, G samples each.
        taken = stream.take(sampled_prompts)[rank * local_sampled : (rank + 1) * local_sampled]
        stream_ids = torch.tensor([position for position, _ in taken])
        rollout = policy.rollout([row for _, row in taken], cfg.group_size)
        rollout.group_ids = stream_ids[rollout.group_ids]
        t_rollout = time.perf_counter() - t0

        # 3b. Rewards [n, K]; advantages over the global batch (after one scoring pass without gradient when
        # needed) with optional per-action credit; optional zero-variance group drop.
        lengths = rollout.action_mask.sum(1).long().tolist()
        reward_table, reward_errors = rewards(rollout.rows, rollout.outputs, completion_length=lengths)
        inputs = update_inputs(policy, rollout, reward_table, rewards, cfg, advantage_state, step / run.max_steps)
        adv, advantages, old_logp = inputs.step, inputs.advantages, inputs.old_logp
        keep = torch.arange(len(rollout))
        if cfg.drop_zero_std_groups or cfg.dynamic_sampling.enabled:
            keep = (~adv.zero_std).nonzero().flatten()
        if cfg.dynamic_sampling.enabled:  # at most the step's prompt count of informative groups
            kept_groups = rollout.group_ids[keep].unique_consecutive()[:local_prompts]
            keep = keep[torch.isin(rollout.group_ids[keep], kept_groups)]
        update_rollout = rollout.select(keep) if len(keep) < len(rollout) else rollout
        t1 = time.perf_counter()

        # 3c. Update.
        update_metrics = run_update(
            policy, update_rollout, advantages[keep], None if old_logp is None else old_logp[keep], cfg,
            optimizer, scheduler, parameters, config.optim.max_grad_norm, accelerator.autocast,
            group_reward_std=adv.group_reward_std[keep], group_mean=adv.group_mean[keep], progress=step / run.max_steps,
        )  # fmt: skip
        t_update = time.perf_counter() - t1

        # 3d. Metrics, samples, evaluation, checkpoint.
        record = _step_record(step, rollout, reward_table, reward_errors, rewards.labels, adv, update_metrics)
        record["num_trained_samples"] = len(keep)
        record |= rewards.take_metrics()
        record |= {"time/rollout_s": t_rollout, "time/update_s": t_update, "time/step_s": time.perf_counter() - t0}
        if main:
            metrics_log.append(record)
            if run.trackers:
                accelerator.log({k: v for k, v in record.items() if isinstance(v, (int, float))}, step=step)
            if run.sample_every and step % run.sample_every == 0:
                dump_samples(out / "samples", step, [prompt_text(r) for r in rollout.rows], rollout.outputs,
                             adv.combined_reward.tolist(), run.samples_per_dump)  # fmt: skip
            _report(progress, record, step, run.log_every)
        if config.eval.every and step % config.eval.every == 0 and step < run.max_steps:
            last_eval = run_eval(step)
        out_of_time = run.max_time_minutes is not None and time.monotonic() - started > 60 * run.max_time_minutes
        out_of_time = bool(all_reduce_sum(torch.tensor([float(out_of_time)])).item())  # every process stops together
        if main and ((run.save_every and step % run.save_every == 0) or step == run.max_steps or out_of_time):
            save_checkpoint(out, step, policy, optimizer, scheduler, state_of(stream, advantage_state), run.keep_last)
        accelerator.wait_for_everyone()
        if out_of_time:  # checkpointed just above
            accelerator.print(f"run.max_time_minutes = {run.max_time_minutes} reached after step {step}")
            break

    # 4. Final evaluation and plots.
    if progress is not None:
        progress.close()
    last_eval = run_eval(step) if eval_rows else last_eval
    if main:
        if last_eval:
            (out / "eval.json").write_text(json.dumps(last_eval, indent=2))
        plot_curves(metrics_log.read(), eval_log.read(), out / "reward_curve.png")
    if run.trackers:
        accelerator.end_training()
    return last_eval or (metrics_log.read()[-1] if main and metrics_log.read() else {})


def state_of(stream: PromptStream, advantage_state: alg.AdvantageState | None) -> dict[str, Any]:
    """What a checkpoint needs beyond weights and optimizer: the data position and estimator statistics."""
    extra = {"advantage_state": advantage_state.state_dict()} if advantage_state is not None else {}
    return {"data_cursor": stream.cursor, "extra": extra}


def _step_record(step, rollout, reward_table, reward_errors, labels, adv, update_metrics) -> dict[str, Any]:
    mask = rollout.action_mask
    lengths = mask.sum(1)
    record: dict[str, Any] = {
        "step": step,
        "reward/mean": adv.stats["reward/mean"],
        "reward/std": adv.stats["reward/std"],
        "num_samples": len(rollout),
        "completion_length/mean": float(lengths.mean()),
        "frac_reward_zero_std": adv.stats["frac_reward_zero_std"],
    }
    for k, label in enumerate(labels):
        record[f"reward/{label}/mean"] = float(reward_table[:, k].nanmean())
        record[f"reward/{label}/errors"] = float(reward_errors[k])
        record[f"reward/{label}/missing"] = float(reward_table[:, k].isnan().sum())
    for key, value in adv.stats.items():  # the combiner names rewards by column: reward_<k>/... -> reward/<label>/...
        prefix, _, rest = key.partition("/")
        if prefix.startswith("reward_") and prefix[7:].isdigit() and rest:
            key = f"reward/{labels[int(prefix[7:])]}/{rest}"
        record.setdefault(key, value)
    record |= update_metrics
    record.setdefault("kl", 0.0)
    record.setdefault("entropy", float("nan"))
    for key, value in rollout.info.items():
        if isinstance(value, (int, float)):
            record[f"rollout/{key}"] = value
    return record


def _progress(run, start_step: int, main: bool):
    if not (run.progress_bar and main):
        return None
    from tqdm.auto import tqdm

    return tqdm(total=run.max_steps, initial=start_step, desc="genalign", dynamic_ncols=True)


def _report(progress, record: dict[str, Any], step: int, log_every: int) -> None:
    fmt = {
        "reward": record["reward/mean"],
        "kl": record.get("kl", 0.0),
        "step_s": record["time/step_s"],
    }
    text = " ".join(f"{k}={v:.3g}" for k, v in fmt.items() if v is not None and not math.isnan(v))
    if progress is not None:
        progress.update(1)
        progress.set_postfix_str(text)
    elif step % log_every == 0:
        print(f"step {step}: {text}", flush=True)
