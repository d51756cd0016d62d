"""The update's scoring pass over every token vs over the trained tokens only (``algorithm.score_only_trained``), with
NAT's [220] random prefix cut (credit ``token_subsample``, ``scheme: prefix``; S-GRPO [312] the same pass).

Setting: a 4-layer Qwen2-architecture model (hidden 256, vocabulary 4,096, built from a config, nothing downloaded),
a batch of ``--samples`` completions of ``--completion-tokens`` tokens after ``--prompt-tokens``-token prompts, CPU.
The advantages are those of ``token_subsample`` with ``scheme: prefix`` (each completion keeps a prefix of ``K ~
U{1..L}`` tokens, Horvitz–Thompson weights on it, 0 after). Both systems compute the same loss, ``Σ A·logp`` through
:func:`genalign.trainer.trained_scoring.score_trained` (the cut pass) or ``policy.score`` (the full pass), forward and
backward, over the batch in micro-batches of each ``--micro-batches`` size (gradients accumulate, as in the update),
alternating, ``--repeats`` times after one warm-up. The table gives the median process CPU seconds, the
activation memory kept for the backward of the largest micro-batch (bytes of every tensor autograd saves, counted by
``torch.autograd.graph.saved_tensors_hooks``; with the weights fixed, this is what a pass adds to the peak), the
peak resident-set growth of a pass over the resident size before it (Linux: the peak is reset through
``/proc/self/clear_refs``; each system in its own process, after a warm-up pass),
and the largest relative gradient difference between the two (the cut pass must give the full pass's gradient).

Run: ``HF_HUB_OFFLINE=1 python benchmarks/bench_trained_scoring.py [--threads 1] [--output FILE]`` (a minute or two;
the measured table is in ``benchmarks/trained_scoring_results.md``); ``--smoke``: a 2-layer hidden-32 model, short
sequences, one repeat (seconds; the times mean nothing, the gradient equality does).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from genalign.algorithms import CREDIT_RULES, ScoreRequest, StepBatch
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.tiny import build_tiny_causal_lm
from genalign.trainer.trained_scoring import score_trained

FULL_MODEL = {"hidden_size": 256, "num_layers": 4, "num_heads": 8, "num_kv_heads": 4, "intermediate_size": 688}
SMOKE_MODEL = {"hidden_size": 32, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 64}


def make_rollout(policy, vocab: int, samples: int, prompt_tokens: int, completion_tokens: int):
    """Forced completions of random ids (lengths in ``[completion_tokens / 2, completion_tokens]``) after random
    prompts; the policy's own ``force`` builds the rollout, as replayed samples are built."""
    generator = torch.Generator().manual_seed(0)
    words = [f"w{i}" for i in range(prompt_tokens)]
    rows = [{"prompt": " ".join(words[: prompt_tokens - i % 4])} for i in range(samples)]
    lengths = torch.randint(completion_tokens // 2, completion_tokens + 1, (samples,), generator=generator)
    completions = [torch.randint(10, vocab, (int(n),), generator=generator) for n in lengths]
    return policy.force(rows, completions, [None] * samples)


def nat_advantages(rollout) -> torch.Tensor:
    """``[N, T]`` advantages after ``token_subsample`` (random prefix cut) of ±1 sample advantages."""
    signs = torch.tensor([1.0, -1.0]).repeat((len(rollout) + 1) // 2)[: len(rollout)]
    batch = StepBatch(sample_advantages=signs, mask=rollout.action_mask, group_ids=rollout.group_ids)
    torch.manual_seed(1)
    per_action = signs[:, None].double() * rollout.action_mask.double()
    return CREDIT_RULES.get("token_subsample")(per_action, batch, scheme="prefix").float()


def one_pass(policy, rollout, advantages, *, cut: bool, micro_batch: int):
    """(CPU seconds, largest micro-batch's saved-activation bytes) of one forward + backward of ``Σ A·logp`` over the
    batch in micro-batches of ``micro_batch`` samples (gradients accumulate, as in the update), and the gradients."""
    policy.model.zero_grad(set_to_none=True)
    weights = {p.untyped_storage().data_ptr() for p in policy.model.parameters()}
    start, largest = time.process_time(), 0
    for first in range(0, len(rollout), micro_batch):
        rows = list(range(first, min(first + micro_batch, len(rollout))))
        part, adv, saved = rollout.select(rows), advantages[rows], {}

        def pack(tensor, saved=saved):
            storage = tensor.untyped_storage()
            if storage.data_ptr() not in weights:  # activations only, each storage once
                saved[storage.data_ptr()] = storage.nbytes()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            if cut:
                logp = score_trained(policy, part, adv, ScoreRequest(), part.old_logp).logp
            else:
                logp = policy.score(part).logp
            loss = -(adv * logp * part.action_mask).sum()
        loss.backward()
        largest = max(largest, sum(saved.values()))
    seconds = time.process_time() - start
    grads = [p.grad.clone() for p in policy.model.parameters() if p.grad is not None]
    return seconds, largest, grads


def reset_peak_rss() -> bool:
    """Reset the process's peak resident set size (Linux: ``5`` to ``/proc/self/clear_refs``); False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def rss_mb(field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (the peak since the last reset) of ``/proc/self/status``, in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1]) / 1024
    raise OSError(f"no {field} in /proc/self/status")


def build(args, folder: Path):
    shape = SMOKE_MODEL if args.smoke else FULL_MODEL
    vocab = 128 if args.smoke else 4096
    path = build_tiny_causal_lm(folder / "model", architecture="qwen2", vocab_size=vocab, **shape)
    config = CausalLMPolicyConfig(model=str(path), use_chat_template=False, dtype="float32",
                                  max_new_tokens=args.completion_tokens + 1, max_prompt_tokens=4 * args.prompt_tokens)  # fmt: skip
    policy = build_policy(config)
    policy.model.train()
    rollout = make_rollout(policy, vocab, args.samples, args.prompt_tokens, args.completion_tokens)
    return policy, rollout, nat_advantages(rollout)


def worker(args) -> dict:
    """One system alone in this process: the growth of its peak resident set over one pass (after a warm-up), from the
    resident size just before it (the peak is reset there); NaN where the peak cannot be reset."""
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        policy, rollout, advantages = build(args, Path(folder))
        one_pass(policy, rollout, advantages, cut=args.worker == "cut", micro_batch=args.micro_batch)  # warm-up
        policy.model.zero_grad(set_to_none=True)
        if not reset_peak_rss():
            return {"rss_growth_mb": math.nan}
        base = rss_mb("VmRSS")
        one_pass(policy, rollout, advantages, cut=args.worker == "cut", micro_batch=args.micro_batch)
        return {"rss_growth_mb": rss_mb("VmHWM") - base}


def rss_growth(args, system: str, micro_batch: int) -> float:
    command = [sys.executable, __file__, "--worker", system, *(["--smoke"] if args.smoke else []),
               "--threads", str(args.threads), "--micro-batch", str(micro_batch)]  # fmt: skip
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}  # freed large buffers go back to the OS at once
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])["rss_growth_mb"]


def measure(args, micro_batch: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        policy, rollout, advantages = build(args, Path(folder))
        times: dict[bool, list[float]] = {False: [], True: []}
        results = {}
        for repeat in range(args.repeats + 1):
            for cut in (False, True):
                seconds, saved, grads = one_pass(policy, rollout, advantages, cut=cut, micro_batch=micro_batch)
                if repeat > 0:
                    times[cut].append(seconds)
                results[cut] = (saved, grads)
    grad_gap = max(
        ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()
        for a, b in zip(results[True][1], results[False][1], strict=True)
    )
    real = rollout.action_mask.sum()
    return {
        "prompt_tokens": float(rollout.per_sample["prompt_mask"].sum(1).float().mean()),
        "micro_batch": micro_batch,
        "parameters": sum(p.numel() for p in policy.model.parameters()),
        "kept_share": float(((advantages != 0) & (rollout.action_mask > 0)).sum() / real),
        "full_cpu_s": statistics.median(times[False]),
        "cut_cpu_s": statistics.median(times[True]),
        "full_saved_mb": results[False][0] / 2**20,
        "cut_saved_mb": results[True][0] / 2**20,
        "full_rss_mb": rss_growth(args, "full", micro_batch),
        "cut_rss_mb": rss_growth(args, "cut", micro_batch),
        "grad_gap": grad_gap,
    }


def report(args, results: list[dict]) -> str:
    first = results[0]
    lines = [
        f"Model: Qwen2 architecture, {first['parameters'] / 1e6:.2f}M parameters; {args.samples} completions of "
        f"{args.completion_tokens // 2}..{args.completion_tokens} tokens after prompts of {first['prompt_tokens']:.0f} tokens on average; "
        f"NAT random prefix cut keeps {first['kept_share']:.0%} of the completion tokens; {torch.get_num_threads()} "
        f"thread(s); median of {args.repeats}. A micro-batch is cut after the last kept token of any of its samples, so "
        "smaller micro-batches keep more of the saving.",
        "",
        "| pass (forward + backward) | micro-batch | CPU (s) | saved activations, largest micro-batch (MB) | "
        "peak RSS growth (MB) | max rel Δ grad |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        cpu, saved = r["cut_cpu_s"] / r["full_cpu_s"], r["cut_saved_mb"] / r["full_saved_mb"]
        rss = r["cut_rss_mb"] / r["full_rss_mb"] if r["full_rss_mb"] > 0 else float("nan")
        m = r["micro_batch"]
        lines += [
            f"| every token | {m} | {r['full_cpu_s']:.3f} | {r['full_saved_mb']:.3f} | {r['full_rss_mb']:.1f} | |",
            f"| trained tokens only | {m} | {r['cut_cpu_s']:.3f} | {r['cut_saved_mb']:.3f} | {r['cut_rss_mb']:.1f} | "
            f"{r['grad_gap']:.1e} |",
            f"| trained / every | {m} | {cpu:.2f}x | {saved:.2f}x | {rss:.2f}x | |",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--completion-tokens", type=int, default=512)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="measured passes per system (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--output", type=Path, default=None, help="also write the table here")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat: seconds, numbers meaningless")
    parser.add_argument("--micro-batches", type=int, nargs="+", default=[8, 1], help="micro-batch sizes to measure")
    parser.add_argument("--worker", choices=("full", "cut"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--micro-batch", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.prompt_tokens, args.completion_tokens, args.samples, args.repeats = 8, 16, 4, 1
        args.micro_batches = [2]  # one size: the resident-size workers are a process each
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    if args.worker is not None:
        print(json.dumps(worker(args)))
        return
    text = report(args, [measure(args, size) for size in args.micro_batches])
    print(text)
    if args.output is not None:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
