"""Part a: how far the rollout's behaviour log-probs are from the re-scored log-probs of the same completions.

A causal-LM policy samples a batch (training rollout, temperature 1) and records the behaviour log-probs from its
sampling engine (``hf``: transformers ``generate``; ``static``: genalign's own KV-cache loop); ``policy.score`` then
re-scores the same completions in one full forward pass, as the trainer does before an update. In bf16 the two paths
round differently (KV cache vs full sequence, other kernels and reduction orders); the trainer's TIS / IcePop
corrections exist for this gap. Reported per model, engine and dtype: mean and max ``|Δ logp|`` over completion tokens
and the fraction of tokens with ``|Δ logp| > 1e-2``; float32 is the control.
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.gpu_check.common import PartResult, qwen2_model

TITLE = "bf16 re-scoring vs rollout log-probs"
THRESHOLD = 1e-2
ENGINES = ("hf", "static")
DTYPES = ("bfloat16", "float32")


def measure(model: str, engine: str, dtype: str, device: str, rows: list[dict], group: int, new_tokens: int) -> dict:
    """Sample ``group`` completions per row, re-score them; ``|Δ logp|`` statistics over the completion tokens."""
    import torch

    from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy

    config = CausalLMPolicyConfig(
        model=model, engine=engine, dtype=dtype, max_new_tokens=new_tokens, max_prompt_tokens=None, seed=0
    )
    policy = build_policy(config, device)
    with torch.no_grad():
        rollout = policy.rollout(rows, group)
        logp = policy.score(rollout).logp  # [N, T]
    mask = rollout.action_mask.bool()  # [N, T]
    delta = (logp.float() - rollout.old_logp.float().to(logp.device)).abs()[mask.to(logp.device)]  # [tokens]
    return {
        "tokens": int(delta.numel()),
        "mean": float(delta.mean()),
        "max": float(delta.max()),
        "above": float((delta > THRESHOLD).float().mean()),
    }


def logprob_mismatch(device: str, *, smoke: bool, workdir: Path) -> PartResult:
    """Part a on ``device``: the trained demo LM and (not in smoke mode) the 0.5B Qwen2-shaped model, both engines,
    bf16 and the float32 control."""
    from benchmarks.bench_lm_step import PROMPTS
    from genalign.data.procedural import arithmetic as arithmetic_rows

    start = time.perf_counter()
    arithmetic = arithmetic_rows(8, 0, digits=3)
    cases = [("arith-lm (trained, 0.9M)", "builtin:arith-lm", arithmetic[: 2 if smoke else 8], 4 if smoke else 8, 8)]
    if not smoke:
        qwen = str(qwen2_model(workdir, smoke=False))
        cases.append(("Qwen2-0.5B shape (random)", qwen, [{"prompt": p} for p in PROMPTS], 8, 256))
    rows = []
    for name, model, prompts, group, new_tokens in cases:
        for engine in ENGINES:
            for dtype in DTYPES:
                r = measure(model, engine, dtype, device, prompts, group, new_tokens)
                rows.append([name, engine, dtype, str(r["tokens"]), f"{r['mean']:.2e}", f"{r['max']:.2e}",
                             f"{100 * r['above']:.2f} %"])  # fmt: skip
    return PartResult(
        part="a",
        title=TITLE,
        status="ok",
        header=["model", "engine", "dtype", "tokens", "mean abs dlogp", "max abs dlogp", f"tokens > {THRESHOLD:g}"],
        rows=rows,
        notes=[
            "Training rollouts at temperature 1; completions re-scored by `policy.score` (one full forward pass, the "
            "chunked log-prob head). float32 is the control: its gap is the KV-cache-vs-full-pass rounding alone."
        ],
        seconds=time.perf_counter() - start,
    )
