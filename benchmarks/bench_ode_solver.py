"""Accuracy of the ODE solvers at equal network evaluations (results in benchmarks/ode_solver_results.md).

Deterministic sampling (every step an ODE step, CFG-free so one network evaluation per step) of a fixed set of prompts
and seeds with ``euler`` at ``--reference-steps`` steps as the reference, then with ``euler`` and ``ab2``
(:mod:`genalign.schedulers.ode_solvers`) at each budget of ``--nfe`` network evaluations. Reported: mean absolute and
RMS error of the final image (pixels in [0, 1]) and of the final latents against the reference, and the seconds of
one batch. Both solvers make the same network calls; ``ab2`` only combines the current and the previous velocity.

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/bench_ode_solver.py [--model builtin:shapes-t2i | DIR] [--nfe 4 6 8 10 16]
        [--reference-steps 100] [--prompts 8] [--seeds 0 1] [--threads 1] [--out FILE]
    HF_HUB_OFFLINE=1 python benchmarks/bench_ode_solver.py --smoke    # seconds: 2 prompts, 1 seed, few steps
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

DEMO_MODEL = "builtin:shapes-t2i"
PROMPTS = [
    "two red circles", "a blue square", "three green triangles", "a yellow circle left of a red square",
    "one purple square", "two blue triangles", "a red triangle above a green circle", "four yellow squares",
]  # fmt: skip


@dataclass(frozen=True)
class Sample:
    """Final images ``[N, H, W, C]`` in [0, 1], final latents ``[N, ...]`` and the seconds it took."""

    images: np.ndarray
    latents: torch.Tensor
    seconds: float


def generate(pipe, prompts: list[str], seeds: list[int], *, steps: int, solver: str, size: int) -> Sample:
    """Deterministic samples of every prompt for every seed (one batch per seed)."""
    images, latents, seconds = [], [], 0.0
    for seed in seeds:
        started = time.perf_counter()
        out = pipe(
            prompts, num_inference_steps=steps, guidance_scale=1.0, height=size, width=size, max_sequence_length=1,
            sde_mask=torch.zeros(len(prompts), steps, dtype=torch.bool), noise_level=0.0,
            generator=torch.Generator(pipe.device).manual_seed(seed), ode_solver=solver,
        )  # fmt: skip
        seconds += time.perf_counter() - started
        images += [np.asarray(image, dtype=np.float64) / 255.0 for image in out.outputs]
        latents.append(out.trajectory.final.double().cpu())
    return Sample(np.stack(images), torch.cat(latents), seconds)


def errors(sample: Sample, reference: Sample) -> tuple[float, float, float, float]:
    """Image MAE, image RMS, latent MAE, latent RMS against the reference."""
    image = sample.images - reference.images
    latent = sample.latents - reference.latents
    return (
        float(np.abs(image).mean()),
        float(np.sqrt((image**2).mean())),
        float(latent.abs().mean()),
        float(latent.pow(2).mean().sqrt()),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEMO_MODEL, help="builtin:<name> or a diffusers folder.")
    parser.add_argument("--nfe", type=int, nargs="+", default=[4, 6, 8, 10, 16], help="Network-evaluation budgets.")
    parser.add_argument("--reference-steps", type=int, default=100, help="Euler steps of the reference.")
    parser.add_argument("--prompts", type=int, default=8, help=f"First prompts of the fixed list (<= {len(PROMPTS)}).")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="Initial-noise seeds (one batch each).")
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="Seconds: 2 prompts, 1 seed, reference 8 steps, NFE 2 4.")
    parser.add_argument("--out", type=Path, default=None, help="Write the markdown table here.")
    args = parser.parse_args(argv)
    if args.smoke:
        args.prompts, args.seeds, args.reference_steps, args.nfe = 2, [0], 8, [2, 4]
    if not 1 <= args.prompts <= len(PROMPTS):
        parser.error(f"--prompts={args.prompts} must be in 1..{len(PROMPTS)}")
    torch.set_num_threads(args.threads)
    from genalign.assets import model_location
    from genalign.pipelines import FlowLogProbPipeline

    pipe = FlowLogProbPipeline.from_pretrained(model_location(args.model, field="--model", marker="model_index.json"))
    prompts = PROMPTS[: args.prompts]
    common = dict(size=args.size)
    with torch.no_grad():
        reference = generate(pipe, prompts, args.seeds, steps=args.reference_steps, solver="euler", **common)
        finer = generate(pipe, prompts, args.seeds, steps=4 * args.reference_steps, solver="euler", **common)
        reference_error = errors(reference, finer)
        rows = []
        for nfe in args.nfe:
            for solver in ("euler", "ab2"):
                sample = generate(pipe, prompts, args.seeds, steps=nfe, solver=solver, **common)
                rows.append((nfe, solver, *errors(sample, reference), sample.seconds))
    lines = [
        f"Command: `HF_HUB_OFFLINE=1 python benchmarks/bench_ode_solver.py {shlex.join(argv or sys.argv[1:])}`",
        "",
        f"Model: {args.model}; {len(prompts)} prompts x {len(args.seeds)} seeds, {args.size}x{args.size} px, CFG-free "
        f"(1 network evaluation per step), every step deterministic; reference: euler at {args.reference_steps} "
        f"steps; torch {torch.__version__}, {args.threads} thread(s). Errors of the final image (pixels in [0, 1]) "
        "and latents against the reference; seconds: all batches of that row. The reference's own error (against "
        f"euler at {4 * args.reference_steps} steps): image MAE {reference_error[0]:.4f}, latent MAE "
        f"{reference_error[2]:.4f}, latent RMS {reference_error[3]:.4f}.",
        "",
        "| NFE | solver | image MAE | image RMS | latent MAE | latent RMS | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {n} | {s} | {a:.4f} | {b:.4f} | {c:.4f} | {d:.4f} | {t:.2f} |" for n, s, a, b, c, d, t in rows]
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
