"""Flow-model benchmarks, side by side (one run; results in benchmarks/flow_results.md).

1. Rollout with per-step log-probs (genalign ``FlowLogProbPipeline``: SDE steps, stored latents, float32 log-probs)
   against plain diffusers sampling of the same model, prompts, resolution, guidance and number of steps.
   Target: <= 1.1x.
2. Training time per iteration (rollout + score + backward + optimizer step) with a MixGRPO sliding window
   (``window_size`` SDE/trained steps, ODE elsewhere) against training all steps. Target: >= 45 % less.

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/bench_flow.py [--model DIR] [--device cpu] [--threads 2] [--out FILE]

Without ``--model`` it uses the demo model ``genalign/assets/shapes-t2i`` when present, else a small SD3 built from
a config (random weights; the timings depend only on the architecture and sizes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DEMO_MODEL = Path(__file__).resolve().parents[1] / "genalign" / "assets" / "shapes-t2i"


def small_sd3(directory: Path) -> Path:
    """An SD3 with 4 transformer layers (hidden 64) and tiny text encoders / VAE, saved as a diffusers folder."""
    from diffusers import SD3Transformer2DModel

    from genalign.pipelines.tiny_models import tiny_sd3_pipeline

    pipe = tiny_sd3_pipeline()
    torch.manual_seed(0)
    pipe.transformer = SD3Transformer2DModel(
        sample_size=32,
        patch_size=2,
        in_channels=4,
        num_layers=4,
        attention_head_dim=16,
        num_attention_heads=4,
        caption_projection_dim=64,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        out_channels=4,
    )
    pipe.save_pretrained(directory)
    return directory


def timed(fn: Callable[[], object], *, repeats: int) -> float:
    """Median wall time of ``fn`` over ``repeats`` runs after one warm-up run."""
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def bench_rollout(model: Path, *, device: str, batch: int, steps: int, size: int, repeats: int) -> tuple[float, float]:
    from diffusers import DiffusionPipeline

    from genalign.pipelines import FlowLogProbPipeline

    prompts = [f"{n} red circles" for n in ("one", "two", "three", "four")] * (batch // 4 + 1)
    prompts = prompts[:batch]
    plain = DiffusionPipeline.from_pretrained(str(model)).to(device)
    plain.set_progress_bar_config(disable=True)
    ours = FlowLogProbPipeline(plain, dynamics="flow_sde", noise_level=0.7)
    common = dict(num_inference_steps=steps, guidance_scale=4.5, height=size, width=size, max_sequence_length=128)

    def run_plain() -> object:
        return plain(prompts, generator=torch.Generator(device).manual_seed(0), **common).images

    def run_ours() -> object:
        return ours(prompts, generator=torch.Generator(device).manual_seed(0), record_latents=True, **common).outputs

    with torch.no_grad():
        return timed(run_plain, repeats=repeats), timed(run_ours, repeats=repeats)


def bench_training(
    model: Path, *, device: str, batch: int, steps: int, size: int, window: int, repeats: int
) -> tuple[float, float]:
    from genalign.algorithms import aggregate, compute_advantages, loss_normalizer, policy_loss
    from genalign.policies.flow import FlowPolicyConfig, build_policy
    from genalign.schedulers import TrainStepsConfig

    rows = [{"prompt": "two red circles"}, {"prompt": "a blue square"}] * max(1, batch // 8)
    group = max(1, batch // len(rows))

    def iteration_time(train_steps: TrainStepsConfig) -> float:
        config = FlowPolicyConfig(
            model=str(model),
            height=size,
            width=size,
            num_steps=steps,
            guidance_scale=4.5,
            lora_rank=8,
            train_steps=train_steps,
        )
        policy = build_policy(config, device)
        optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-4)

        def one_iteration() -> None:
            rollout = policy.rollout(rows, group_size=group)
            rewards = torch.randn(len(rollout))
            advantages = compute_advantages("grpo", rewards, rollout.group_ids)
            scored = policy.score(rollout)
            mask = rollout.action_mask
            loss, _ = policy_loss(
                scored.logp, rollout.old_logp, advantages, mask, clip="ppo", eps_low=1e-4, eps_high=1e-4
            )
            aggregate(loss, mask, "token_mean", loss_normalizer(mask, "token_mean")).backward()
            optimizer.step()
            optimizer.zero_grad()

        return timed(one_iteration, repeats=repeats)

    all_steps = iteration_time(TrainStepsConfig(strategy="all"))
    mix = iteration_time(TrainStepsConfig(strategy="sliding_window", stochastic="trained", window_size=window))
    return all_steps, mix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=25, help="MixGRPO: a window of 4 over 25 steps")
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="Write the markdown table here.")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or (
            DEMO_MODEL if (DEMO_MODEL / "model_index.json").exists() else small_sd3(Path(tmp) / "sd3")
        )
        plain, ours = bench_rollout(
            model, device=args.device, batch=args.batch, steps=args.steps, size=args.size, repeats=args.repeats
        )
        all_steps, mix = bench_training(
            model,
            device=args.device,
            batch=args.batch,
            steps=args.steps,
            size=args.size,
            window=args.window,
            repeats=args.repeats,
        )
    name = args.model or (DEMO_MODEL.name if model == DEMO_MODEL else "small SD3 from config (4 layers, hidden 64)")
    lines = [
        f"Model: {name}; device {args.device}, {args.threads} threads; batch {args.batch}, {args.size}x{args.size} px, "
        f"{args.steps} steps, CFG 4.5; median of {args.repeats} runs after a warm-up.",
        "",
        "| measurement | baseline | genalign | ratio | target |",
        "|---|---|---|---|---|",
        f"| rollout: plain diffusers vs with log-probs (s) | {plain:.3f} | {ours:.3f} | {ours / plain:.2f}x | <= 1.1x |",
        f"| training iteration: all {args.steps} steps vs MixGRPO window {args.window} (s) | {all_steps:.3f} | "
        f"{mix:.3f} | {100 * (1 - mix / all_steps):.0f} % less | >= 45 % less |",
    ]
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
