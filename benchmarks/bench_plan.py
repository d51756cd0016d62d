"""``genalign plan`` against measured memory: real architectures trained on CPU, estimate vs measured peak.

Cases (models of real architectures built from configs, random weights, float32, CPU):

* ``lm``: a Llama causal LM (8 layers, hidden 512, GQA 8/4 heads, vocabulary 32,000: 56.0M parameters) trained by
  genalign's trainer on the arithmetic prompts of the LM demo: static-engine rollouts of 8 prompts x 8 samples x 64
  new tokens, full fine-tuning with AdamW, a KL term (so the frozen reference copy is loaded), micro-batches of 16.
* ``flow``: an SD3 transformer (6 joint blocks, hidden 256, patch 2 on 48 x 48 pixels: 576 image tokens; 13.7M
  parameters) in the text-to-image demo's pipeline (its tiny CLIP encoders and pixel-space VAE), full fine-tuning,
  Flow-GRPO with 3 of 10 steps trained, micro-batches of 4.

Each case runs ``--steps`` training steps (``genalign.trainer.recipe.start_run`` + ``training_step``: rollout,
rewards, update; no evaluation, no checkpoint) in a fresh process, once alone and once as 2 processes sharded with
FSDP2 (``torchrun --nproc_per_node 2``, ``run.distributed=fsdp``, gloo, ``run.cpu=true``).

What is measured, and why: the process's resident memory (``VmRSS`` of /proc/self/status), sampled every millisecond
by a thread, minus its value after the imports (the modules a run imports are loaded before the baseline: their code is
not the model's memory) and before the run is built. Resident memory, not only anonymous memory: transformers loads
safetensors weights on the CPU without copying them (their pages stay file-mapped until written), so a frozen
reference copy would otherwise be invisible. glibc is told to return freed blocks at once
(``MALLOC_MMAP_THRESHOLD_=65536``, ``MALLOC_TRIM_THRESHOLD_=0``), so the resident size follows the live tensors
instead of the allocator's retained pages: the comparison is with the plan's tensor total (``genalign plan`` without
its GPU context and allocator-slack overheads, which a CPU run does not have). The peak is also split at the end of the rollout (the sampler switches phase when ``policy.rollout``
returns), to compare both phases. What the delta holds besides the plan's tensors (tokenizer, prompt rows, Python
objects, gloo buffers) is small and left in: the measurement is not corrected in the planner's favour.

Run: ``python benchmarks/bench_plan.py`` (a few minutes on 2 cores; writes ``benchmarks/plan_results.md``);
``--smoke``: tiny models, 1 step, one process, prints the table and writes nothing into benchmarks/; its two cases are
measured one after the other in the same fresh process (its figures mean nothing; a process's start is most of its CPU).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: case -> (model shape, training overrides); "smoke" shapes are tiny.
LM_SHAPES = {
    "full": {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 8, "num_attention_heads": 8,
             "num_key_value_heads": 4, "vocab_size": 32000},
    "smoke": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 1000},
}  # fmt: skip
FLOW_SHAPES = {
    "full": {"num_layers": 6, "attention_head_dim": 64, "num_attention_heads": 4, "patch_size": 2},
    "smoke": {"num_layers": 2, "attention_head_dim": 16, "num_attention_heads": 2, "patch_size": 4},
}
LM_OVERRIDES = {
    "full": ["policy.max_new_tokens=64", "algorithm.group_size=8", "algorithm.prompts_per_step=8",
             "algorithm.micro_batch_size=16", "algorithm.kl_coef=0.01"],
    "smoke": ["policy.max_new_tokens=8", "algorithm.group_size=4", "algorithm.prompts_per_step=2",
              "algorithm.micro_batch_size=4", "algorithm.kl_coef=0.01"],
}  # fmt: skip
FLOW_OVERRIDES = {
    "full": ["policy.height=48", "policy.width=48", "policy.lora.rank=0", "policy.sample_batch_size=8",
             "algorithm.group_size=4", "algorithm.prompts_per_step=4", "algorithm.micro_batch_size=4",
             "policy.train_steps.fraction=0.3"],
    "smoke": ["policy.height=16", "policy.width=16", "policy.lora.rank=0", "policy.sample_batch_size=4",
              "algorithm.group_size=2", "algorithm.prompts_per_step=2", "algorithm.micro_batch_size=2",
              "policy.train_steps.fraction=0.2"],
}  # fmt: skip
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}


# ---------------------------------------------------------------------------------------------- model folders
def make_lm_folder(folder: Path, size: str) -> Path:
    """A random-weight Llama causal LM with the LM demo's character tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(**LM_SHAPES[size], tie_word_embeddings=False, eos_token_id=1, pad_token_id=0, bos_token_id=None,
                         max_position_embeddings=256)  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ROOT / "genalign/assets/arith-lm" / name, folder / name)
    return folder


def make_flow_folder(folder: Path, size: str) -> Path:
    """The text-to-image demo's pipeline with a larger random-weight SD3 transformer."""
    import torch
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(0)
    shutil.copytree(
        ROOT / "genalign/assets/shapes-t2i-faded", folder, ignore=shutil.ignore_patterns("*.md", "*.json.bak")
    )
    demo = json.loads((folder / "transformer/config.json").read_text())
    shape = FLOW_SHAPES[size]
    transformer = SD3Transformer2DModel(
        sample_size=64, in_channels=demo["in_channels"], out_channels=demo["out_channels"],
        joint_attention_dim=demo["joint_attention_dim"], pooled_projection_dim=demo["pooled_projection_dim"],
        caption_projection_dim=shape["attention_head_dim"] * shape["num_attention_heads"], pos_embed_max_size=32,
        qk_norm=None, dual_attention_layers=(), **shape,
    )  # fmt: skip
    shutil.rmtree(folder / "transformer")
    transformer.save_pretrained(folder / "transformer")
    return folder


def case_config(case: str, folder: Path, size: str, out: Path, processes: int) -> tuple[str, list[str]]:
    """``(preset, overrides)`` of a case on ``processes`` processes."""
    common = [f"policy.model={folder}", f"run.output_dir={out}", "run.overwrite=true", "run.cpu=true",
              "run.num_threads=1", "data.train.args.size=256", "run.progress_bar=false"]  # fmt: skip
    if processes > 1:
        common.append("run.distributed=fsdp")
    if case == "lm":
        return "configs/demo_arith_grpo.yaml", common + LM_OVERRIDES[size]
    return "configs/demo_shapes_flow_grpo.yaml", common + FLOW_OVERRIDES[size]


# ---------------------------------------------------------------------------------------------- measurement
def resident_bytes() -> int:
    """``VmRSS`` of this process in bytes (anonymous memory plus the pages of mapped files it has touched)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmRSS line (Linux only)")


class PeakSampler(threading.Thread):
    """Samples ``VmRSS`` every ``interval`` seconds and keeps the peak of each phase."""

    def __init__(self, interval: float = 0.001) -> None:
        super().__init__(daemon=True)
        self.interval, self.phase, self.peaks = interval, "build", {}
        self.running = True

    def run(self) -> None:
        while self.running:
            value = resident_bytes()
            self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), value)
            time.sleep(self.interval)

    def stop(self) -> dict[str, int]:
        self.running = False
        self.join()
        return self.peaks


def import_what_the_run_imports(family: str) -> None:
    """Import the modules building the run imports (120+ MB of code objects for transformers' model classes alone),
    so that the baseline is taken after them: module code is not the model's memory."""
    import importlib

    modules = ["accelerate", "peft", "genalign.rewards", "genalign.data", "transformers.models.llama.modeling_llama"]
    modules += {"causal_lm": ["genalign.policies.lm.causal", "genalign.policies.lm.engines.static"],
                "flow": ["genalign.policies.flow.policy", "diffusers.pipelines.stable_diffusion_3",
                         "transformers.models.clip.modeling_clip"]}[family]  # fmt: skip
    for name in modules:
        importlib.import_module(name)


def worker(args) -> None:
    """One process of the cases in ``--worker`` (a JSON list of ``[preset, overrides, result folder]``), one after the
    other: each builds its run, trains ``--steps`` steps and writes its measured peaks as JSON into its folder."""
    for preset, overrides, result_dir in json.loads(args.worker):
        measure_here(preset, overrides, Path(result_dir), args.steps)
        gc.collect()  # the case's run is gone before the next case's baseline


def measure_here(preset: str, overrides: list[str], result_dir: Path, steps: int) -> None:
    """One case in this process: build the run, train ``steps`` steps, write the measured peaks as JSON."""
    import torch

    from genalign.config import load_config
    from genalign.trainer.recipe import start_run, training_step

    config = load_config(preset, overrides)
    torch.set_num_threads(1)
    import_what_the_run_imports(config.policy.family)
    baseline = resident_bytes()
    sampler = PeakSampler()
    sampler.start()
    run, _ = start_run(config)
    rollout = run.policy.rollout

    def rollout_then_update(*a, **kw):
        sampler.phase = "rollout"
        try:
            return rollout(*a, **kw)
        finally:
            sampler.phase = "update"

    run.policy.rollout = rollout_then_update
    for step in range(1, steps + 1):
        training_step(run, step)
    peaks = sampler.stop()
    rank = int(os.environ.get("RANK", "0"))
    result = {phase: value - baseline for phase, value in peaks.items()} | {"baseline": baseline, "rank": rank}
    (result_dir / f"rank{rank}.json").write_text(json.dumps(result))


def measure(cases: dict[str, Path], size: str, processes: int, steps: int, work: Path) -> dict[str, list[dict]]:
    """Run ``cases`` (name -> model folder) in fresh process(es), one case after the other; per case, the per-rank
    results."""
    jobs, results = [], {}
    for case, folder in cases.items():
        results[case] = work / f"{case}-{processes}"
        results[case].mkdir(parents=True, exist_ok=True)
        jobs.append([*case_config(case, folder, size, work / f"run-{case}-{processes}", processes), str(results[case])])
    script = [str(Path(__file__).resolve()), "--worker", json.dumps(jobs), "--steps", str(steps)]
    if processes == 1:
        command = [sys.executable, *script]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
                   *script]  # fmt: skip
    env = {**os.environ, **MALLOC_ENV, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"{', '.join(cases)} on {processes} process(es) failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
        )
    return {
        case: [json.loads(p.read_text()) for p in sorted(folder.glob("rank*.json"))] for case, folder in results.items()
    }


def estimate(case: str, folder: Path, size: str, processes: int, work: Path):
    """The plan of the same config on ``processes`` processes, tensors only."""
    from genalign.config import load_config
    from genalign.planning import NO_OVERHEADS, plan_memory

    preset, overrides = case_config(case, folder, size, work / "plan", processes)
    return plan_memory(load_config(preset, overrides), gpus=processes, gpu_memory_gb=1e6, overheads=NO_OVERHEADS)


# ---------------------------------------------------------------------------------------------- report
def row(case: str, processes: int, plan, measured: list[dict]) -> dict:
    worst = max(measured, key=lambda r: max(r.get("rollout", 0), r.get("update", 0)))
    peak = max(worst.get(phase, 0) for phase in ("build", "rollout", "update"))
    return {
        "case": case, "processes": processes, "parameters": plan.parameters.total,
        "plan_rollout": plan.total("rollout"), "plan_update": plan.total("update"), "plan_peak": plan.tensors_peak,
        "measured_rollout": worst.get("rollout", 0), "measured_update": worst.get("update", 0), "measured_peak": peak,
        "error": plan.tensors_peak / peak - 1,
    }  # fmt: skip


def table(rows: list[dict]) -> str:
    mb = 1e6
    lines = [
        "| case | processes | parameters | plan rollout (MB) | measured rollout (MB) | plan update (MB) | "
        "measured update (MB) | plan peak (MB) | measured peak (MB) | estimate vs measured |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['processes']} | {r['parameters'] / 1e6:.1f}M | {r['plan_rollout'] / mb:.0f} | "
            f"{r['measured_rollout'] / mb:.0f} | {r['plan_update'] / mb:.0f} | {r['measured_update'] / mb:.0f} | "
            f"{r['plan_peak'] / mb:.0f} | {r['measured_peak'] / mb:.0f} | {r['error']:+.1%} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny models, 1 step, 1 process; writes nothing")
    parser.add_argument("--steps", type=int, default=2, help="training steps per measured run")
    parser.add_argument("--processes", default="1,2", help="process counts to measure, e.g. 1 or 1,2")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/plan_results.md"), help="results file (full runs)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    size = "smoke" if args.smoke else "full"
    steps, counts = (1, [1]) if args.smoke else (args.steps, [int(n) for n in args.processes.split(",")])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        folders = {"lm": make_lm_folder(work / "lm", size), "flow": make_flow_folder(work / "t2i", size)}
        # a fresh process per case (the smoke: one process for both)
        groups = [folders] if args.smoke else [{case: folder} for case, folder in folders.items()]
        for group in groups:
            for processes in counts:
                measured = measure(group, size, processes, steps, work)
                for case, folder in group.items():
                    plan = estimate(case, folder, size, processes, work)
                    rows.append(row(case, processes, plan, measured[case]))
                    print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = table(rows)
    print("\n" + text)
    if not args.smoke:
        Path(args.out).write_text(report(text, rows, steps))
        print(f"wrote {args.out}")


def report(text: str, rows: list[dict], steps: int) -> str:
    worst = max(abs(r["error"]) for r in rows)
    phases = [
        (r[f"plan_{phase}"] / r[f"measured_{phase}"] - 1, f"{phase} of {r['case']} on {r['processes']} process(es)")
        for r in rows
        for phase in ("rollout", "update")
    ]
    phase_error, phase_name = max(phases, key=lambda p: abs(p[0]))
    return (
        "# `genalign plan` against measured memory (CPU)\n\n"
        "Written by `python benchmarks/bench_plan.py` (method in its docstring): each case trains "
        f"{steps} steps in a fresh process; the measured peak is the growth of the process's resident memory (VmRSS) "
        "over its value before the run is built (sampled every millisecond, glibc returning freed blocks at once), the "
        "plan's figure its tensor total (no GPU context, no allocator slack). For 2 processes, the rank with the "
        "higher peak.\n\n"
        f"{text}\n\nLargest difference at the peak: {worst:.1%} of the measured peak. Largest difference of a phase: "
        f"{phase_error:+.1%} ({phase_name}).\n"
    )


if __name__ == "__main__":
    main()
