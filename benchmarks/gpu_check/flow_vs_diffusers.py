"""Part e: a flow training iteration against a plain diffusers sampling loop, same model and steps.

The model is an SD3 built from a config (random weights; on a GPU 12 layers of hidden 768 at 64 px: 1,024 image tokens;
in smoke mode ``bench_flow.small_sd3``'s 4 layers of 64 at 32 px), float32. Measured with ``benchmarks/bench_flow.py``'s
own functions, each system timed in alternation after a warm-up:

* ``bench_rollout``: plain diffusers ``pipe(...)`` against genalign's sampling with per-step log-probs (SDE steps,
  stored latents), the same pipeline object, prompts, resolution, guidance and steps;
* ``bench_training``: one genalign training iteration (rollout + ``score`` + the clipped objective + backward + AdamW
  step on LoRA rank 8) with every step trained, and with a MixGRPO window.

Reported: median seconds, the paired rollout ratio, and each training iteration over the plain sampling time.
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.gpu_check.common import PartResult

TITLE = "flow iteration vs plain diffusers sampling"
GPU_MODEL = {"num_layers": 12, "num_heads": 12, "head_dim": 64}
GPU_SIZES = {"batch": 8, "steps": 10, "size": 64, "guidance": 4.5, "text_tokens": 128, "repeats": 3}
SMOKE_SIZES = {"batch": 2, "steps": 2, "size": 32, "guidance": 4.5, "text_tokens": 8, "repeats": 1}


def flow_vs_diffusers(device: str, *, smoke: bool, workdir: Path) -> PartResult:
    """Part e on ``device`` (module docstring)."""
    from benchmarks.bench_flow import bench_rollout, bench_training, small_sd3

    start = time.perf_counter()
    shape = {} if smoke else GPU_MODEL
    model = str(small_sd3(workdir / ("sd3-smoke" if smoke else "sd3-medium"), **shape))
    sizes = SMOKE_SIZES if smoke else GPU_SIZES
    window = 1 if smoke else 2
    rollout = bench_rollout(model, device=device, cfg_batching="batched", **sizes)  # one call per step, as diffusers
    training = bench_training(model, device=device, window=window, cfg_batching="batched", **sizes)
    plain = rollout.baseline
    rows = [
        ["plain diffusers sampling", f"{plain:.3f}", "1.00"],
        ["genalign rollout with log-probs", f"{rollout.contender:.3f}", f"{rollout.ratio:.2f} (paired)"],
        [f"genalign iteration, all {sizes['steps']} steps trained", f"{training.baseline:.3f}",
         f"{training.baseline / plain:.2f}"],
        [f"genalign iteration, MixGRPO window {window}", f"{training.contender:.3f}", f"{training.contender / plain:.2f}"],
    ]  # fmt: skip
    layers = shape.get("num_layers", 4)
    hidden = shape.get("num_heads", 4) * shape.get("head_dim", 16)
    return PartResult(
        part="e",
        title=TITLE,
        status="ok",
        header=["system", "median (s)", "over plain sampling"],
        rows=rows,
        notes=[
            f"SD3 from a config ({layers} layers, hidden {hidden}, random weights, float32); batch {sizes['batch']}, "
            f"{sizes['size']}x{sizes['size']} px, {sizes['steps']} steps, CFG {sizes['guidance']:g}, "
            f"{sizes['text_tokens']} T5 tokens; {sizes['repeats']} interleaved round(s) after a warm-up."
        ],
        seconds=time.perf_counter() - start,
    )
