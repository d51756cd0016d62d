"""Scoring a GRPO batch with the group's shared prompt encoded once ([58] Prefix Grouper, [50]) vs the plain pass.

Setting: a 4-layer Qwen2-architecture model (hidden 256, vocabulary 4,096, built from a config, nothing downloaded),
2 prompts of ``--prompt-tokens`` tokens x ``--group-size`` completions of ``--completion-tokens`` tokens, CPU.
Both systems run :func:`genalign.policies.lm.logprobs.completion_scores` (what ``CausalLMPolicy.score`` calls) on the
same batch, forward and backward of ``sum(logp * weights)``, alternating, ``--repeats`` times after one warm-up; the
table gives the median process CPU seconds (all its threads; steadier than wall time on a shared machine), the CPU and
wall-time ratios, the share of the prompt in the encoded tokens, and the largest log-prob
and gradient differences between the two (the shared pass must give the same values up to float rounding).

Run: ``HF_HUB_OFFLINE=1 python benchmarks/bench_shared_prefix.py [--prompt-tokens 512] [--threads 1] [--output FILE]``
(one thread by default: on a loaded machine a second thread's spin-waits inflate both CPU and wall time; a minute or two;
the measured table is in ``benchmarks/shared_prefix_results.md``); ``--smoke``: a 2-layer hidden-32 model, 32-token
prompts, groups of 4 with 8-token completions, one repeat (seconds; the times mean nothing, the equality does).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from genalign.policies.lm.logprobs import completion_scores
from genalign.policies.lm.shared_prefix import shared_prefix_hidden_states
from genalign.policies.lm.tiny import build_tiny_causal_lm

FULL_MODEL = {"hidden_size": 256, "num_layers": 4, "num_heads": 8, "num_kv_heads": 4, "intermediate_size": 688}
SMOKE_MODEL = {"hidden_size": 32, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 64}
PROMPTS = 2


def make_batch(vocab: int, prompt_tokens: int, group_size: int, completion_tokens: int, seed: int = 0):
    """``PROMPTS`` left-padded prompts (the second 3/4 as long), each repeated ``group_size`` times, and right-padded
    completions of random lengths in ``[completion_tokens / 2, completion_tokens]``."""
    generator = torch.Generator().manual_seed(seed)
    rows = PROMPTS * group_size
    prompt_ids = torch.randint(10, vocab, (PROMPTS, prompt_tokens), generator=generator)
    prompt_mask = torch.ones(PROMPTS, prompt_tokens, dtype=torch.long)
    prompt_mask[1, : prompt_tokens // 4] = 0
    prompt_ids = (prompt_ids * prompt_mask).repeat_interleave(group_size, dim=0)  # [B, P]
    prompt_mask = prompt_mask.repeat_interleave(group_size, dim=0)  # [B, P]
    completion_ids = torch.randint(10, vocab, (rows, completion_tokens), generator=generator)  # [B, C]
    lengths = torch.randint(completion_tokens // 2, completion_tokens + 1, (rows,), generator=generator)
    completion_mask = (torch.arange(completion_tokens)[None, :] < lengths[:, None]).long()  # [B, C]
    return prompt_ids, prompt_mask, completion_ids * completion_mask, completion_mask


def one_pass(model, batch, weights, *, shared: bool) -> tuple[tuple[float, float], torch.Tensor, list[torch.Tensor]]:
    """(CPU seconds of the process, wall seconds) of one forward + backward, the log-probs ``[B, C]`` and the
    parameter gradients."""
    model.zero_grad(set_to_none=True)
    start, start_cpu = time.perf_counter(), time.process_time()
    hidden_states = shared_prefix_hidden_states if shared else None
    logp = completion_scores(model, *batch, temperature=1.0, chunk_size=256, hidden_states=hidden_states).logp
    (logp * weights).sum().backward()
    seconds = (time.process_time() - start_cpu, time.perf_counter() - start)
    return seconds, logp.detach(), [p.grad.clone() for p in model.parameters()]


def measure(args) -> dict:
    from transformers import AutoModelForCausalLM

    shape = SMOKE_MODEL if args.smoke else FULL_MODEL
    vocab = 128 if args.smoke else 4096
    with tempfile.TemporaryDirectory() as folder:
        path = build_tiny_causal_lm(Path(folder) / "model", architecture="qwen2", vocab_size=vocab, **shape)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.train()
    batch = make_batch(vocab, args.prompt_tokens, args.group_size, args.completion_tokens)
    weights = torch.randn(batch[2].shape, generator=torch.Generator().manual_seed(1))
    times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    results = {}
    for repeat in range(args.repeats + 1):
        for shared in (False, True):
            seconds, logp, grads = one_pass(model, batch, weights, shared=shared)
            if repeat > 0:
                times[shared].append(seconds)
            results[shared] = (logp, grads)
    logp_gap = (results[True][0] - results[False][0]).abs().max().item()
    grad_gap = max(
        ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()
        for a, b in zip(results[True][1], results[False][1], strict=True)
    )
    prompt_tokens = int(batch[1].sum())
    completion_tokens = int(batch[3].sum())
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "plain_cpu_s": statistics.median(t[0] for t in times[False]),
        "shared_cpu_s": statistics.median(t[0] for t in times[True]),
        "plain_s": statistics.median(t[1] for t in times[False]),
        "shared_s": statistics.median(t[1] for t in times[True]),
        "prompt_share": prompt_tokens / (prompt_tokens + completion_tokens),
        "logp_gap": logp_gap,
        "grad_gap": grad_gap,
    }


def report(args, result: dict) -> str:
    ratio = result["shared_s"] / result["plain_s"]
    cpu_ratio = result["shared_cpu_s"] / result["plain_cpu_s"]
    lines = [
        f"Model: Qwen2 architecture, {result['parameters'] / 1e6:.2f}M parameters; {PROMPTS} prompts of "
        f"{args.prompt_tokens} tokens x {args.group_size} completions of <= {args.completion_tokens} tokens; "
        f"{torch.get_num_threads()} threads; median of {args.repeats}.",
        "",
        "| scoring pass (forward + backward) | plain CPU (s) | shared prefix CPU (s) | shared / plain CPU "
        "| shared / plain wall | prompt share of tokens | max abs Δ logp | max rel Δ grad |",
        "|---|---|---|---|---|---|---|---|",
        f"| completion_scores | {result['plain_cpu_s']:.3f} | {result['shared_cpu_s']:.3f} | {cpu_ratio:.2f}x | "
        f"{ratio:.2f}x | {result['prompt_share']:.0%} | {result['logp_gap']:.1e} | {result['grad_gap']:.1e} |",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--completion-tokens", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="measured passes per system (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--output", type=Path, default=None, help="also write the table here")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat: seconds, numbers meaningless")
    args = parser.parse_args()
    if args.smoke:
        args.prompt_tokens, args.completion_tokens, args.group_size, args.repeats = 32, 8, 4, 1
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    text = report(args, measure(args))
    print(text)
    if args.output is not None:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
