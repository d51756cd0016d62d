"""Peak memory of the exact per-token forward KL to the reference (score feature ``ref_forward_kl``, TDPO [48]) with
its backward pass, against a naive pass through the full logits of the policy and the reference, at a vocabulary of
50,000 tokens.

Setting: a Qwen2-architecture policy (hidden 64, 2 layers, LoRA rank 8 on the attention projections; the reference is
the model with the adapters off) with a word-level tokenizer of 50,000 tokens (:mod:`genalign.policies.lm.tiny`),
float32, CPU, a batch of 4 completions of 512 tokens after 16-token prompts (2,048 scored tokens). Two paths, each in
its own worker process so that each peak is its own, each followed by ``backward()`` of the summed KL:

* ``chunked``: ``policy.score(rollout, ScoreRequest.of("ref_forward_kl"))``: the reference pass keeps its hidden states
  ``[B, C, H]``, and the policy's chunked head pass compares both distributions ``policy.logprob_chunk_size`` = 256
  tokens at a time (the policy's side checkpointed);
* ``naive``: the full ``[B, P + C, V]`` logits of the policy (with gradient) and of the reference (without), both
  ``log_softmax``-ed, ``Σ_v p_ref (log p_ref − log pθ)``.

Peak memory is the worker's peak resident set size (``ru_maxrss``) minus its resident size just before the pass;
glibc is told to return large freed buffers at once (as in ``bench_teacher_memory.py``). The two paths' KL values must
agree.

Run: ``HF_HUB_OFFLINE=1 python benchmarks/bench_reference_kl_memory.py [--output
benchmarks/reference_kl_memory_results.md]`` (a minute or two); ``--smoke``: vocabulary 2,000, 2 completions of 16
tokens, both paths in this process, nothing written (the figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.bench_teacher_memory import peak_rss_mb, rss_mb, run_worker

SHAPE = {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 128}
FULL = {"vocab": 50_000, "batch": 4, "prompt": 16, "completion": 512, "chunk": 256}
SMOKE = {"vocab": 2_000, "batch": 2, "prompt": 8, "completion": 16, "chunk": 8}


def build_model(folder: Path, vocab: int) -> Path:
    from genalign.policies.lm.tiny import build_tiny_causal_lm, build_tiny_tokenizer

    return build_tiny_causal_lm(folder / "policy", vocab_size=vocab, tokenizer=build_tiny_tokenizer(vocab), **SHAPE)


def measure(mode: str, folder: Path, sizes: dict[str, int]) -> dict:
    """One forward and backward of ``mode`` (``chunked`` or ``naive``); its peak memory, time and KL sum."""
    import torch

    from genalign.policies.base import Rollout, ScoreRequest
    from genalign.policies.lm.causal import CausalLMPolicyConfig, LoRAConfig, build_policy
    from genalign.policies.lm.logprobs import position_ids_from_mask

    torch.set_num_threads(1)
    config = CausalLMPolicyConfig(model=str(folder), logprob_chunk_size=sizes["chunk"], lora=LoRAConfig(rank=8))
    torch.manual_seed(0)  # the same adapters in both paths (LoRA A is drawn when the policy is built)
    policy = build_policy(config, "cpu")
    for name, param in policy.model.named_parameters():
        if "lora_B" in name:
            param.data.normal_(0, 0.05)  # the policy away from the reference
    generator = torch.Generator().manual_seed(0)
    shape = (sizes["batch"], sizes["completion"])
    prompt = torch.randint(4, sizes["vocab"], (sizes["batch"], sizes["prompt"]), generator=generator)
    completion = torch.randint(4, sizes["vocab"], shape, generator=generator)
    mask = torch.ones(shape)
    rollout = Rollout(
        rows=[{"prompt": ""}] * sizes["batch"], outputs=[""] * sizes["batch"],
        group_ids=torch.zeros(sizes["batch"], dtype=torch.long), old_logp=torch.zeros(shape), action_mask=mask,
        per_sample={"prompt_ids": prompt, "prompt_mask": torch.ones_like(prompt), "completion_ids": completion,
                    "completion_mask": mask},
    )  # fmt: skip
    base, start = rss_mb(), time.perf_counter()
    if mode == "chunked":
        kl = policy.score(rollout, ScoreRequest.of("ref_forward_kl"))["ref_forward_kl"]  # [B, C]
    else:
        ids = torch.cat([prompt, completion], dim=1)
        attention = torch.ones_like(ids)
        positions = position_ids_from_mask(attention)
        width = sizes["prompt"]

        def log_probs(model):
            logits = model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=False).logits
            return logits[:, width - 1 : -1].float().log_softmax(-1)  # [B, C, V]

        with torch.no_grad(), policy.model.disable_adapter():
            ref = log_probs(policy.hf_model)
        kl = (ref.exp() * (ref - log_probs(policy.hf_model))).sum(-1)  # [B, C]
    kl.sum().backward()
    seconds = time.perf_counter() - start
    return {"mode": mode, "seconds": seconds, "base_rss_mb": base, "peak_rss_mb": peak_rss_mb(),
            "kl_sum": float(kl.detach().sum())}  # fmt: skip


def spawn(folder: Path, mode: str) -> dict:
    """``measure(mode)`` in a fresh worker process."""
    return run_worker(__file__, ["--model", str(folder)], mode)


def render(results: dict[str, dict], sizes: dict[str, int], smoke: bool) -> str:
    import torch
    import transformers

    naive, chunked = results["naive"], results["chunked"]
    naive_peak = naive["peak_rss_mb"] - naive["base_rss_mb"]
    chunked_peak = chunked["peak_rss_mb"] - chunked["base_rss_mb"]
    tokens = sizes["batch"] * sizes["completion"]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    header = (
        f"Measured by `python benchmarks/bench_reference_kl_memory.py{' --smoke' if smoke else ''}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: CPU ({platform.processor() or platform.machine()}), "
        f"1 torch thread, torch {torch.__version__}, transformers {transformers.__version__}; load average at start "
        f"{load}. Qwen2 (hidden 64, 2 layers, LoRA rank 8; reference = adapters off), vocabulary {sizes['vocab']:,}, "
        f"{sizes['batch']} completions x {sizes['completion']} tokens = {tokens:,} scored tokens after "
        f"{sizes['prompt']}-token prompts, float32, forward and backward; each path in its own process"
        + (" (smoke: one process; figures meaningless)" if smoke else "")
    )
    ratio = chunked_peak / naive_peak if naive_peak > 0 else float("nan")
    return "\n".join([
        header + ".", "",
        "| path | peak over start (MB) | time (s) |", "|---|---|---|",
        f"| naive full logits (policy with grad + reference, `[B, P + C, V]` each) | {naive_peak:,.0f} | "
        f"{naive['seconds']:.2f} |",
        f"| genalign `ref_forward_kl` (chunk {sizes['chunk']} tokens) | {chunked_peak:,.0f} | {chunked['seconds']:.2f} |",
        "",
        f"Chunked / naive peak: {ratio:.0%}. Same values: |sum KL naive - chunked| = "
        f"{abs(naive['kl_sum'] - chunked['kl_sum']):.2e} (sum {chunked['kl_sum']:.4f}).",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one process, nothing written")
    parser.add_argument("--output", type=Path, help="also write the table to this markdown file")
    parser.add_argument("--worker", choices=["chunked", "naive"], help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(measure(args.worker, args.model, FULL)))
        return 0
    sizes = SMOKE if args.smoke else FULL
    with tempfile.TemporaryDirectory(prefix="bench_reference_kl_memory_") as folder:
        model = build_model(Path(folder), sizes["vocab"])
        if args.smoke:
            results = {mode: measure(mode, model, sizes) for mode in ("naive", "chunked")}
        else:
            results = {mode: spawn(model, mode) for mode in ("naive", "chunked")}
    table = render(results, sizes, args.smoke)
    print(table)
    if args.output is not None and not args.smoke:
        args.output.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
