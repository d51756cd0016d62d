"""Flow-model benchmarks, side by side (one run; results in benchmarks/flow_results.md).

1. Rollout with per-step log-probs (genalign ``FlowLogProbPipeline``: SDE steps, stored latents, float32 log-probs)
   against plain diffusers sampling of the same loaded pipeline (same weights, prompts, resolution, guidance, text
   length and number of steps). Target: <= 1.1x.
2. Training time per iteration (``policy.on_step`` + rollout + ``score`` + the ``clipped_ratio`` objective + backward +
   optimizer step) with a MixGRPO sliding window (``window_size`` SDE/trained steps, ODE elsewhere) against training
   all steps. Target: >= 45 % less.

The compared systems run interleaved (A, B, A, B, ...) after one warm-up each, so that the load of a shared machine
falls on both alike; reported are the median seconds of each and the paired ratio (the median over rounds of B / A
within a round).

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/bench_flow.py [--model builtin:shapes-t2i-faded | DIR] [--random-model]
        [--threads 2] [--repeats 3] [--out FILE]
    HF_HUB_OFFLINE=1 python benchmarks/bench_flow.py --smoke    # seconds: tiny sizes, the same code path

The default model is the text-to-image demo model ``builtin:shapes-t2i-faded`` (genalign/assets; 32 px, one zero "T5"
token, as its model card says); ``--random-model`` uses a small SD3 built from a config (random weights, 4 layers,
hidden 64, tiny CLIP and T5 encoders; the timings depend only on the architecture and sizes).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

DEMO_MODEL = "builtin:shapes-t2i-faded"


def small_sd3(directory: Path, *, num_layers: int = 4, num_heads: int = 4, head_dim: int = 16) -> Path:
    """An SD3 with ``num_layers`` transformer layers (hidden ``num_heads x head_dim``, default 4 layers of 64) and tiny
    text encoders / VAE, saved as a diffusers folder."""
    from diffusers import SD3Transformer2DModel

    from genalign.pipelines.architectures.sd3 import SD3Architecture

    pipe = SD3Architecture.tiny_pipeline()
    torch.manual_seed(0)
    pipe.transformer = SD3Transformer2DModel(
        sample_size=32,
        patch_size=2,
        in_channels=4,
        num_layers=num_layers,
        attention_head_dim=head_dim,
        num_attention_heads=num_heads,
        caption_projection_dim=num_heads * head_dim,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        out_channels=4,
    )
    pipe.save_pretrained(directory)
    return directory


@dataclass(frozen=True)
class Pair:
    """Median seconds of a baseline and a contender timed in alternation, and their paired ratio."""

    baseline: float
    contender: float
    ratio: float  # median over rounds of contender / baseline of the same round


def interleaved(baseline: Callable[[], object], contender: Callable[[], object], *, repeats: int) -> Pair:
    """Time ``repeats`` rounds of (baseline, contender), after one warm-up call of each."""
    baseline()  # warm-up
    contender()
    rounds = []
    for _ in range(repeats):
        seconds = []
        for fn in (baseline, contender):
            start = time.perf_counter()
            fn()
            seconds.append(time.perf_counter() - start)
        rounds.append(seconds)
    return Pair(
        baseline=statistics.median(a for a, _ in rounds),
        contender=statistics.median(b for _, b in rounds),
        ratio=statistics.median(b / a for a, b in rounds),
    )


def bench_rollout(
    model: str, *, device: str, batch: int, steps: int, size: int, guidance: float, text_tokens: int, repeats: int,
    cfg_batching: str = "separate",
) -> Pair:  # fmt: skip
    """Plain diffusers (baseline) against genalign's sampling with log-probs: one batch of ``batch`` images."""
    from genalign.assets import model_location
    from genalign.pipelines import FlowLogProbPipeline

    prompts = [f"{n} red circles" for n in ("one", "two", "three", "four")] * (batch // 4 + 1)
    prompts = prompts[:batch]
    ours = FlowLogProbPipeline.from_pretrained(
        model_location(model, field="--model", marker="model_index.json"),
        device=device,
        dynamics="flow_sde",
        noise_level=0.7,
    )
    ours.arch.batch_cfg = cfg_batching == "batched"  # as policy.cfg_batching sets it
    plain = ours.pipe  # the very same diffusers pipeline object: same weights, scheduler config and encoders
    common = dict(
        num_inference_steps=steps, guidance_scale=guidance, height=size, width=size, max_sequence_length=text_tokens
    )

    def run_plain() -> object:
        return plain(prompts, generator=torch.Generator(device).manual_seed(0), **common).images

    def run_ours() -> object:
        return ours(prompts, generator=torch.Generator(device).manual_seed(0), record_latents=True, **common).outputs

    with torch.no_grad():
        return interleaved(run_plain, run_ours, repeats=repeats)


def bench_training(
    model: str,
    *,
    device: str,
    batch: int,
    steps: int,
    size: int,
    guidance: float,
    text_tokens: int,
    window: int,
    repeats: int,
    cfg_batching: str = "separate",
) -> Pair:
    """Training all steps (baseline) against a MixGRPO window: one training iteration of ``batch`` images."""
    from genalign import algorithms as alg
    from genalign.policies.flow import FlowPolicyConfig, build_policy, flow_lora
    from genalign.schedulers import TrainStepsConfig

    rows = [{"prompt": "two red circles"}, {"prompt": "a blue square"}][: max(1, min(2, batch // 2))]
    group = max(1, batch // len(rows))

    def iteration(train_steps: TrainStepsConfig) -> Callable[[], None]:
        config = FlowPolicyConfig(
            model=model,
            height=size,
            width=size,
            num_steps=steps,
            guidance_scale=guidance,
            max_sequence_length=text_tokens,
            lora=flow_lora(rank=8),
            train_steps=train_steps,
            cfg_batching=cfg_batching,
        )
        policy = build_policy(config, device)
        optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-4)
        objective = alg.OBJECTIVES.get("clipped_ratio")
        counter = iter(range(1, 1_000_000))

        def one_iteration() -> None:
            policy.on_step(next(counter))
            rollout = policy.rollout(rows, group)
            rewards = torch.randn(len(rollout))  # [N]
            advantages = alg.compute_advantages("grpo", rewards, rollout.group_ids)  # [N]
            for module in policy.modules_to_train():
                module.train()
            score = policy.score(rollout)
            mask = rollout.action_mask  # [N, T]
            context = alg.StepBatch(old_logp=rollout.old_logp, mask=mask, group_ids=rollout.group_ids)
            loss, _ = objective(score, advantages, context, clip="ppo", eps_low=1e-4, eps_high=1e-4)  # [N, T]
            alg.aggregate(loss, mask, "token_mean", alg.loss_normalizer(mask, "token_mean")).backward()
            optimizer.step()
            optimizer.zero_grad()
            policy.after_optimizer_step()
            for module in policy.modules_to_train():
                module.eval()

        return one_iteration

    window_steps = TrainStepsConfig(strategy="sliding_window", stochastic="trained", window_size=window)
    return interleaved(iteration(TrainStepsConfig(strategy="all")), iteration(window_steps), repeats=repeats)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help=f"builtin:<name> or a diffusers folder (default {DEMO_MODEL}).")
    parser.add_argument("--random-model", action="store_true", help="A small SD3 built from a config instead.")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=25, help="MixGRPO: a window of 4 over 25 steps")
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--guidance", type=float, default=4.5, help="CFG scale (1 = no unconditional branch).")
    parser.add_argument(
        "--text-tokens", type=int, default=None, help="max_sequence_length (T5 tokens); default 1 for a built-in "
        "model (its usage setting: one zero token), 128 otherwise."
    )  # fmt: skip
    parser.add_argument("--repeats", type=int, default=10, help="Interleaved rounds (each system once per round).")
    parser.add_argument(
        "--cfg-batching", choices=("separate", "batched"), default="separate",
        help="genalign's guidance branches: two calls, or one call of twice the batch (policy.cfg_batching).",
    )  # fmt: skip
    parser.add_argument("--smoke", action="store_true", help="Seconds: batch 2, 3 steps, window 1, 1 repeat.")
    parser.add_argument("--out", type=Path, default=None, help="Write the markdown table here.")
    args = parser.parse_args(argv)
    if args.model is not None and args.random_model:
        parser.error("--model and --random-model exclude each other")
    if args.smoke:
        args.batch, args.steps, args.window, args.repeats = 2, 3, 1, 1
    torch.set_num_threads(args.threads)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

    with tempfile.TemporaryDirectory() as tmp:
        if args.random_model:
            model = str(small_sd3(Path(tmp) / "sd3"))
            name = "small SD3 from config (random weights, 4 layers, hidden 64)"
        else:
            model = name = args.model or DEMO_MODEL
        text_tokens = args.text_tokens or (1 if model.startswith("builtin:") else 128)
        sizes = dict(
            device=args.device, batch=args.batch, steps=args.steps, size=args.size, guidance=args.guidance,
            text_tokens=text_tokens, repeats=args.repeats, cfg_batching=args.cfg_batching,
        )  # fmt: skip
        rollout = bench_rollout(model, **sizes)
        training = bench_training(model, window=args.window, **sizes)
    lines = [
        f"Command: `HF_HUB_OFFLINE=1 python benchmarks/bench_flow.py {shlex.join(argv or sys.argv[1:])}`; "
        f"started {started}, load average {load}.",
        "",
        f"Model: {name}; device {args.device}, {args.threads} threads, torch {torch.__version__}; batch {args.batch}, "
        f"{args.size}x{args.size} px, {args.steps} steps, CFG {args.guidance:g} ({args.cfg_batching} branches), "
        f"{text_tokens} T5 token(s); {args.repeats} "
        "interleaved rounds after a warm-up of each: median seconds, and the median of the per-round ratios.",
        "",
        "| measurement | baseline | genalign | ratio | target |",
        "|---|---|---|---|---|",
        f"| rollout: plain diffusers vs with log-probs (s) | {rollout.baseline:.3f} | {rollout.contender:.3f} | "
        f"{rollout.ratio:.2f}x | <= 1.1x |",
        f"| training iteration: all {args.steps} steps vs MixGRPO window {args.window} (s) | {training.baseline:.3f} | "
        f"{training.contender:.3f} | {100 * (1 - training.ratio):.0f} % less | >= 45 % less |",
    ]
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
