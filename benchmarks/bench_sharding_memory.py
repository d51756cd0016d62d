"""Per-process memory of the trained state under FSDP2 sharding: parameters, gradients and optimizer state held by each
process after one training step, with 1 and 2 processes (CPU, gloo).

Run: ``HF_HUB_OFFLINE=1 python benchmarks/bench_sharding_memory.py`` (about a minute); ``--smoke``: one family, nothing
written. The script launches itself under ``torch.distributed.run`` for each process count, each process trains one
step of the demo config with ``run.distributed=fsdp`` (``none`` for one process) and reports the bytes of the tensors it
holds (its shards; the root's parameters gathered for the backward pass are freed again after the step), and the table
goes to ``benchmarks/sharding_memory_results.md``.

Families: the causal LM demo (full fine-tuning: every weight trained, so every byte is sharded) and the flow demo
(LoRA: the frozen base weights of the transformer are sharded too, the VAE and text encoder stay replicated).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a clone without installing genalign

CONFIGS = {
    "causal_lm (full fine-tuning)": ("configs/demo_arith_grpo.yaml", ["algorithm.prompts_per_step=4"]),
    "flow (LoRA)": (
        "configs/demo_shapes_flow_grpo.yaml",
        ["algorithm.prompts_per_step=2", "algorithm.group_size=2", "policy.num_steps=3", "policy.sample_batch_size=2"],
    ),
}
COMPONENTS = ("parameters", "gradients", "optimizer state")


def local_bytes(tensor) -> int:
    """Bytes this process holds for ``tensor`` (its shard of a sharded tensor)."""
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def measure(config_path: str, overrides: list[str], out: Path) -> None:
    """One training step, then the bytes held by this process, written to ``out/rank<r>.json``."""
    from genalign.config import load_config
    from genalign.trainer.distributed import rank_and_world
    from genalign.trainer.recipe import start_run, training_step

    world = int(os.environ.get("WORLD_SIZE", "1"))
    settings = [f"run.output_dir={out / 'run'}", "run.overwrite=true", "run.progress_bar=false", "eval.at_start=false",
                "eval.every=0", "run.sample_every=0", "run.save_every=0", "data.eval=null",
                f"run.distributed={'fsdp' if world > 1 else 'none'}"]  # fmt: skip
    config = load_config(str(ROOT / config_path), [*overrides, *settings])
    run, _ = start_run(config)
    training_step(run, 1)
    policy_params = {id(p): p for root in run.policy.modules_to_train() for p in root.parameters()}
    trained = [p for _, p in run.named_parameters]
    state = [v for p in trained for v in run.optimizer.state.get(p, {}).values() if hasattr(v, "numel")]
    result = {
        "parameters": sum(local_bytes(p) for p in policy_params.values()),
        "gradients": sum(local_bytes(p.grad) for p in trained if p.grad is not None),
        "optimizer state": sum(local_bytes(v) for v in state),
    }
    rank, _ = rank_and_world()
    (out / f"rank{rank}.json").write_text(json.dumps(result))


#: Smoke mode: the smallest step that still allocates every gradient and optimizer state (and a small training set).
SMOKE = ["algorithm.group_size=2", "policy.max_new_tokens=2", "data.train.args.size=256"]


def launch(config: str, overrides: list[str], processes: int) -> list[dict[str, int]]:
    """Per-process results of ``measure`` under ``processes`` processes."""
    with tempfile.TemporaryDirectory() as scratch:
        launcher = [sys.executable]
        if processes > 1:
            launcher += ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
        command = [*launcher, __file__, "--worker", config, scratch, *overrides]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        return [json.loads((Path(scratch) / f"rank{r}.json").read_text()) for r in range(processes)]


def table(results: dict[str, dict[int, list[dict[str, int]]]]) -> str:
    lines = [
        "| model | component | 1 process (bytes) | 2 processes, per process (bytes) | ratio |",
        "|---|---|---|---|---|",
    ]
    for name, by_count in results.items():
        for component in COMPONENTS:
            one = by_count[1][0][component]
            two = [r[component] for r in by_count[2]]
            ratio = max(two) / one if one else float("nan")
            lines.append(f"| {name} | {component} | {one:,} | {' / '.join(f'{b:,}' for b in two)} | {ratio:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the causal LM only; write nothing")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "sharding_memory_results.md")
    args = parser.parse_args()
    names = list(CONFIGS)[:1] if args.smoke else list(CONFIGS)
    started = time.perf_counter()
    extra = SMOKE if args.smoke else []
    results = {name: {n: launch(CONFIGS[name][0], [*CONFIGS[name][1], *extra], n) for n in (1, 2)} for name in names}
    text = table(results)
    print(text)
    if args.smoke:
        return
    command = "HF_HUB_OFFLINE=1 python benchmarks/bench_sharding_memory.py"
    args.out.write_text(
        "# Per-process memory of the trained state: 1 process vs 2 FSDP2 processes\n\n"
        f"`{command}` on {time.strftime('%Y-%m-%d', time.gmtime())}, {platform.processor() or platform.machine()}, "
        f"torch {__import__('torch').__version__}, gloo, {time.perf_counter() - started:.0f} s.\n\n"
        "Bytes each process holds after one training step of the demo config (its shards; gathered copies are freed "
        "after the step). FSDP2 pads each sharded dimension to a multiple of the process count, so a half can be a "
        "few bytes more than half.\n\n" + text + "\n"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        measure(sys.argv[2], sys.argv[4:], Path(sys.argv[3]))
    else:
        main()
