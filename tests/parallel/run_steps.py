"""``[torchrun --nproc_per_node N] python tests/parallel/run_steps.py OUT CASE [CASE ...] [--steps S] [--save-at K]
[--resume-from DIR --resume-step K]``: train contract cases on rollouts that do not depend on the number of processes and write what
the multi-process tests compare.

Every process samples the WHOLE step's prompts with the same seed (so every process holds the one-process rollout),
then trains on its share of the groups through the trainer's own :func:`~genalign.trainer.recipe.learn_from_samples`
under ``run.distributed = fsdp`` (``none`` for one process). Written per case: ``OUT/<case>.safetensors``, the
trainable parameters and the optimizer's tensors after the last step as full tensors (``param/<name>``,
``optim/<name>/<key>``), gathered from their shards; with ``--save-at K`` the run's checkpoint of step ``K`` in
``OUT/<case>-run`` and the state it holds in ``OUT/<case>.saved.safetensors``; the state before the first step in
``OUT/<case>.initial.safetensors``; with ``--resume-from`` the run first restores ``DIR/<case>-run/checkpoints/step-K`` (possibly
written with another number of processes) and ``OUT/<case>.restored.safetensors`` holds the state right after restoring.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
from safetensors.torch import save_file

import tests.policies.contract_reward  # noqa: F401  (registers the reward)
from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from genalign.trainer.distributed import rank_and_world
from genalign.trainer.recipe import (
    checkpoint,
    learn_from_samples,
    rollout_request,
    seed_step,
    start_run,
)
from genalign.trainer.step_samples import collect_samples
from tests.policies.contract_cases import case_config

#: SGD with momentum (optimizer state to restore): its update is linear in the gradient, so float rounding between layouts stays at rounding size. Adam's
#: normalised update m / sqrt(v) turns rounding noise in gradient entries that are zero in exact arithmetic (e.g. the
#: key biases of attention, which softmax ignores) into steps of size lr, whatever the layout.
OPTIM = {"optimizer": "sgd", "lr": 0.05, "momentum": 0.9}


def layout_free_rollout(run, step: int):
    """The one-process rollout of ``step`` (same seed in every process), restricted to this process's groups."""
    cfg = run.config.algorithm
    seed_step(run.config.run.seed, step, 0)
    run.policy.on_step(step)
    taken = run.stream.take(cfg.prompts_to_sample())
    with run.parallel.full_parameters():
        rollout = run.policy.rollout([row for _, row in taken], cfg.group_size, request=rollout_request(run))
    rollout.group_ids = torch.tensor([position for position, _ in taken])[rollout.group_ids]
    share = len(taken) // run.world
    mine = {position for position, _ in taken[run.rank * share : (run.rank + 1) * share]}
    return rollout.select([i for i, g in enumerate(rollout.group_ids.tolist()) if g in mine])


def gathered_state(run) -> dict[str, torch.Tensor]:
    """Trainable parameters and optimizer tensors as full tensors (collective)."""
    full = lambda t: (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().float().contiguous().clone()  # noqa: E731
    state = {}
    for name, param in run.named_parameters:
        state[f"param/{name}"] = full(param)
        for key, value in run.optimizer.state.get(param, {}).items():
            state[f"optim/{name}/{key}"] = full(value)
    return state


def train_case(case: str, out: Path, *, steps: int, save_at: int | None, resume: str | None) -> None:
    world = int(os.environ.get("WORLD_SIZE", "1"))  # the launcher's; the process group starts with the run
    config = case_config(case, str(out / f"{case}-run"))
    config["algorithm"]["minibatches"] = 1  # minibatches split each process's share: not layout-free
    config["optim"] |= OPTIM
    config["eval"] = {"at_start": False, "every": 0}
    config["run"] |= {"distributed": "fsdp" if world > 1 else "none", "max_steps": steps, "save_every": 0,
                      "resume": resume, "overwrite": resume is None}  # fmt: skip
    run, start = start_run(from_dict(TrainConfig, config))
    main = rank_and_world()[0] == 0
    start_state = gathered_state(run)
    if main:
        save_file(start_state, str(out / f"{case}.{'restored' if resume else 'initial'}.safetensors"))
    for step in range(start + 1, steps + 1):
        samples = collect_samples(run, step, layout_free_rollout(run, step), rollout_request(run))
        learn_from_samples(run, step, samples, sampling_seconds=0.0)
        if step == save_at:
            checkpoint(run, step)
            saved = gathered_state(run)
            if main:
                save_file(saved, str(out / f"{case}.saved.safetensors"))
    final = gathered_state(run)
    if main:
        save_file(final, str(out / f"{case}.safetensors"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("cases", nargs="+")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--save-at", type=int)
    parser.add_argument("--resume-from", type=Path)
    parser.add_argument("--resume-step", type=int)
    args = parser.parse_args()
    for name in args.cases:
        resume = None
        if args.resume_from is not None:
            resume = str(args.resume_from / f"{name}-run" / "checkpoints" / f"step-{args.resume_step}")
        train_case(name, args.out, steps=args.steps, save_at=args.save_at, resume=resume)
