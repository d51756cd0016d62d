"""Signal-to-noise ratio of one training batch's gradient, per flow method and reward, on the text-to-image demo
(results in benchmarks/flow_gradient_snr_results.md).

Why a method learns slowly is often not its objective but its gradient estimate: a batch of ``N`` samples gives
``g = mu + noise`` with ``mu`` the expected gradient. This script freezes the weights, draws ``K`` independent rollout
batches of the **same prompts** (fresh initial and SDE noise each), and computes each batch's gradient with the
trainer's own code (:func:`genalign.trainer.step_batch.build_step_batch` and :func:`genalign.trainer.update.run_update`
with a zero learning rate, so every policy hook, credit option and likelihood-free objective is included). From the
``K`` gradients ``g_k`` (mean ``g_bar``):

* ``V = sum_k |g_k - g_bar|^2 / (K - 1)``, the noise of one batch (``tr Sigma``);
* ``|mu|^2 ~ |g_bar|^2 - V / K`` (unbiased), so ``snr2 = |mu|^2 / V`` is the squared signal-to-noise ratio of one batch,
  and ``N / snr2`` the samples one update needs for SNR 1 (the signal adds up linearly in samples, the noise in
  quadrature);
* the mean pairwise cosine of the ``g_k`` as a second, model-free reading (``~ snr2 / (1 + snr2)``).

Usage (a variant = a name and ``key=value`` overrides of the config, as on the command line of ``genalign train``)::

    HF_HUB_OFFLINE=1 python benchmarks/bench_flow_gradient_snr.py [--config configs/demo_shapes_flow_grpo.yaml]
        [--batches 8] [--variant NAME 'key=value ...'] ... [--json PATH]
    HF_HUB_OFFLINE=1 python benchmarks/bench_flow_gradient_snr.py --smoke   # seconds: one tiny variant, 2 batches

Without ``--variant`` it measures the default list below: the demo preset (shapes-t2i-faded, whose planted colour
flaw is prompt-independent), the unbiased shapes-t2i with the same and with the first preset's reward, JPEG
compressibility (DDPO) as the contrast of a global image property, and the flow methods through the trainer's config
keys.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from genalign.algorithms import names_by
from genalign.config import TrainConfig, from_dict
from genalign.config.core import apply_overrides, load_yaml
from genalign.data import load_rows
from genalign.policies.base import RolloutRequest
from genalign.sampling.prompt_stream import PromptStream
from genalign.trainer.optim import named_trainable_parameters
from genalign.trainer.recipe import build_policy, seed_step
from genalign.trainer.rewards import RewardSet
from genalign.trainer.step_batch import build_step_batch
from genalign.trainer.update import run_update

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo_shapes_flow_grpo.yaml"
UNBIASED = ["policy.model=builtin:shapes-t2i"]  # the shapes-world model without the demo's planted colour flaw
JPEG = ["rewards=[{fn: jpeg_compressibility}]", "eval.accuracy_reward=null"]
#: ``--smoke``: the demo preset at 2 prompts x 2 images, 2 steps, a continuous reward (no tied groups)
SMOKE = ["algorithm.prompts_per_step=2", "algorithm.group_size=2", "policy.num_steps=2", "run.num_threads=1", *JPEG]
#: (name, overrides): each override is one ``key=value`` string as ``genalign train`` takes them.
DEFAULT_VARIANTS: list[tuple[str, list[str]]] = [
    ("demo preset: Flow-GRPO on shapes-t2i-faded, colour-and-count partial credit", []),
    ("shapes-t2i (unbiased), same prompts and reward", UNBIASED),
    (
        "shapes-t2i, kind-aware partial credit, all templates (the first preset)",
        [*UNBIASED, "rewards.0.args.match_kind=true", "data.train.args.templates=[count, pair, relation]"],
    ),
    ("shapes-t2i, shared x_T per group", [*UNBIASED, "policy.group_initial_noise=shared"]),
    ("shapes-t2i, JPEG compressibility (contrast: a global property)", [*UNBIASED, *JPEG]),
    ("demo, shared x_T per group (DanceGRPO)", ["policy.group_initial_noise=shared"]),
    ("demo, SDE + training on all 10 steps", ["policy.train_steps.strategy=all"]),
    (
        "demo, MixGRPO window (3 SDE steps)",
        ["policy.train_steps={strategy: sliding_window, stochastic: trained, window_size: 3}"],
    ),
    ("demo, tree (BranchGRPO, splits 0, 3, 6)", ["policy.tree={enabled: true, split_steps: [0, 3, 6]}"]),
    (
        "demo, Chunk-GRPO (chunks 0-1, 2-4)",
        [
            "algorithm.ratio_level={name: chunk, chunk_boundaries: [0, 2, 5]}",
            "algorithm.clip={name: ppo, eps_low: 1.0e-3, eps_high: 1.0e-3}",
        ],
    ),
    ("demo, DiffusionNFT", ["policy.likelihood_free.method=nft"]),
    ("demo, V-GRPO (ELBO)", ["policy.likelihood_free.method=elbo"]),
]


def gradient_statistics(gradients: torch.Tensor, samples_per_batch: int) -> dict[str, float]:
    """Signal-to-noise statistics of ``K`` independent gradient estimates ``[K, P]`` of one expectation."""
    k = gradients.shape[0]
    if k < 2:
        raise ValueError(f"--batches must be >= 2 to estimate a variance; got {k}")
    mean = gradients.mean(0)
    noise = float(((gradients - mean) ** 2).sum(1).sum() / (k - 1))  # V = tr Sigma of one batch
    signal = float(mean.square().sum()) - noise / k  # unbiased |mu|^2
    unit = gradients / gradients.norm(dim=1, keepdim=True).clamp_min(1e-30)
    total = unit.double().sum(0)  # the mean over the pairs i < j of u_i . u_j, from |sum u|^2 - sum |u_i|^2
    mean_cosine = (float(total @ total) - float(unit.double().square().sum())) / (k * (k - 1))
    snr2 = signal / noise if noise > 0 else float("inf")
    return {
        "snr2_per_batch": snr2,
        "samples_for_snr_1": samples_per_batch / snr2 if snr2 > 0 else float("inf"),
        "mean_pairwise_cosine": mean_cosine,
        "gradient_norm": float(gradients.norm(dim=1).mean()),
    }


def measure(config_path: Path, overrides: list[str], batches: int) -> dict[str, Any]:
    """``batches`` gradients of the configured objective at the initial weights, on one fixed set of prompts."""
    config = from_dict(TrainConfig, apply_overrides(load_yaml(config_path), overrides))
    torch.set_num_threads(config.run.num_threads or torch.get_num_threads())
    cfg = config.algorithm
    policy = build_policy(config, torch.device("cpu"))
    rewards = RewardSet(config.rewards)
    rows = [
        row for _, row in PromptStream(load_rows(config.data.train), seed=config.run.seed).take(cfg.prompts_per_step)
    ]
    parameters = [param for _, param in named_trainable_parameters(policy)]
    optimizer = torch.optim.SGD(parameters, lr=0.0)  # the update code runs unchanged; the weights stay put
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    policy.on_step(1)  # every batch sees the first iteration's trained steps / window
    structure = names_by("rollout", cfg.needs())
    probe = rewards.weighted_sum
    stage, plan = cfg.advantage_stage(), cfg.loss_plan()
    gradients, mean_rewards, seconds = [], [], []
    for batch in range(batches):
        seed_step(config.run.seed + 1, batch, 0)
        t0 = time.perf_counter()
        rollout = policy.rollout(rows, cfg.group_size, request=RolloutRequest(structure=structure, reward_probe=probe))
        lengths = rollout.action_mask.sum(1).long().tolist()
        reward_table, _ = rewards(rollout.rows, rollout.outputs, completion_length=lengths)
        step_batch, _ = build_step_batch(
            policy, rollout, reward_table, rewards.weights, stage, plan, 0.0,
            micro_batch_size=cfg.micro_batch_size, on_policy=cfg.fully_on_policy,
        )  # fmt: skip
        optimizer.zero_grad(set_to_none=True)  # run_update skips a batch with nothing to train on: no stale grads
        run_update(policy, rollout, step_batch, plan, cfg, optimizer, scheduler, parameters, None)
        seconds.append(time.perf_counter() - t0)
        gradients.append(
            torch.cat([torch.zeros(p.numel()) if p.grad is None else p.grad.flatten() for p in parameters])
        )
        mean_rewards.append(float(step_batch["combined_reward"].nanmean()))
    stats = gradient_statistics(torch.stack(gradients), len(rollout))
    return stats | {
        "samples_per_batch": len(rollout),
        "mean_reward": sum(mean_rewards) / batches,
        "seconds_per_batch": sum(seconds) / batches,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--batches", type=int, default=8, help="Independent batches K at the fixed weights.")
    parser.add_argument(
        "--variant", nargs=2, action="append", metavar=("NAME", "OVERRIDES"), default=None,
        help="A name and its overrides as one shell-quoted string, e.g. 'policy.noise_level=0.3 run.seed=1'.",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="default: flow_gradient_snr.json in the temp dir")
    parser.add_argument("--smoke", action="store_true", help="One tiny variant, 2 batches; JSON only if --json.")
    args = parser.parse_args()
    variants = [(name, shlex.split(text)) for name, text in args.variant] if args.variant else DEFAULT_VARIANTS
    if args.smoke:
        variants, args.batches = [("smoke: demo preset, 2 x 2 images, 2 steps, JPEG", SMOKE)], 2
    elif args.json is None:
        args.json = Path(tempfile.gettempdir()) / "flow_gradient_snr.json"
    results = {}
    print("| variant | mean reward | cos(g_i, g_j) | SNR^2 / batch | samples for SNR 1 | s / batch |")
    print("|---|---|---|---|---|---|")
    for name, overrides in variants:
        result = measure(args.config, overrides, args.batches)
        results[name] = {"overrides": overrides, **result}
        print(
            f"| {name} | {result['mean_reward']:.3f} | {result['mean_pairwise_cosine']:.3f} | "
            f"{result['snr2_per_batch']:.3f} | {result['samples_for_snr_1']:.3g} | {result['seconds_per_batch']:.1f} |",
            flush=True,
        )
    if args.json is not None:
        args.json.write_text(
            json.dumps({"config": str(args.config), "batches": args.batches, "results": results}, indent=1)
        )
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
