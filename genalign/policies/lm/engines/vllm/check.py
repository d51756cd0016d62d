"""The GPU round trip of the vllm engine: rollout -> weight update -> rollout shows the new weights.

:func:`weight_update_roundtrip` starts a genalign vLLM server with the vLLM environment's Python (``GENALIGN_VLLM_PYTHON``
or the ``vllm_python`` argument) on the trainer's GPU (CUDA IPC weights, sleep mode), runs :func:`roundtrip` and stops
the server. :func:`roundtrip` itself works with any engine, so the CPU suite runs it against the fake server.

Evidence that vLLM samples the pushed weights: the engine's log-probs of the second rollout match the *updated* model
(mean |Δ log p| small) and not the old one (several times larger).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from genalign.policies.lm.engines.base import Generation, SamplingParams

VLLM_PYTHON_ENV = "GENALIGN_VLLM_PYTHON"
SERVER_FILE = Path(__file__).with_name("server.py")
PROMPTS = ("1 + 2 =", "what is 3 * 4 ? answer :", "7 - 5 =")


@torch.no_grad()
def mean_logprob_gap(
    model: nn.Module, prompt_ids: Tensor, prompt_mask: Tensor, generation: Generation, temperature: float
) -> float:
    """Mean |engine log-prob - ``model``'s log-prob| over the completion tokens of ``generation``."""
    from genalign.policies.lm.logprobs import completion_scores

    mask = generation.completion_mask
    scores = completion_scores(
        model, prompt_ids, prompt_mask, generation.completion_ids, mask, temperature=temperature, chunk_size=256
    )
    return float(((scores.logp.float() - generation.logp).abs() * mask).sum() / mask.sum().clamp(min=1))


def left_padded_prompts(tokenizer, device: torch.device) -> tuple[Tensor, Tensor]:
    """:data:`PROMPTS` as left-padded ``[B, P]`` ids and mask on ``device``."""
    rows = [tokenizer(text)["input_ids"] for text in PROMPTS]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tokenizer.pad_token_id or 0, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for row, tokens in enumerate(rows):
        ids[row, width - len(tokens) :] = torch.tensor(tokens)
        mask[row, width - len(tokens) :] = 1
    return ids.to(device), mask.to(device)


def roundtrip(engine: Any, model: nn.Module, tokenizer, *, noise: float = 0.02, seed: int = 0) -> dict[str, Any]:
    """Rollout, perturb ``model``'s weights, rollout again; figures and ``new_weights_seen``."""
    device = next(model.parameters()).device
    ids, mask = left_padded_prompts(tokenizer, device)
    params = SamplingParams(max_new_tokens=16, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=0)
    generator = torch.Generator(device=device)
    first = engine.generate(ids, mask, params, generator.manual_seed(seed))
    first_gap = mean_logprob_gap(model, ids, mask, first, 1.0)
    old = {name: p.detach().clone() for name, p in model.named_parameters()}
    noise_generator = torch.Generator(device=device).manual_seed(seed + 1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(noise * torch.randn(param.shape, generator=noise_generator, device=device, dtype=param.dtype))
    start = time.perf_counter()
    second = engine.generate(ids, mask, params, generator.manual_seed(seed))
    seconds = time.perf_counter() - start
    new_gap = mean_logprob_gap(model, ids, mask, second, 1.0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(old[name])
    old_gap = mean_logprob_gap(model, ids, mask, second, 1.0)
    return {
        "mean_abs_dlogp_first_rollout": round(first_gap, 5),
        "mean_abs_dlogp_vs_updated_model": round(new_gap, 5),
        "mean_abs_dlogp_vs_old_model": round(old_gap, 5),
        "second_rollout_seconds_incl_push": round(seconds, 3),
        "weight_pushes": engine.sync.weight_pushes,
        "new_weights_seen": new_gap < 0.05 and old_gap > 3 * new_gap,
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def weight_update_roundtrip(
    model_dir: str, device: str | torch.device, *, vllm_python: str | None = None, startup_s: float = 600.0
) -> dict[str, Any]:
    """Start a server for ``model_dir`` on ``device``'s GPU, run :func:`roundtrip` through it, stop the server."""
    from transformers import AutoModelForCausalLM

    from genalign.policies.lm.engines.vllm.engine import VLLMEngine
    from genalign.policies.lm.engines.vllm.options import VLLMOptions
    from genalign.policies.lm.tokenizer import load_tokenizer

    python = vllm_python or os.environ.get(VLLM_PYTHON_ENV)
    if not python:
        raise RuntimeError(f"set {VLLM_PYTHON_ENV} to the vLLM environment's python (docs/vllm.md).")
    port = _free_port()
    options = VLLMOptions(
        server_url=f"http://127.0.0.1:{port}",
        weight_transfer="ipc",
        gpu_memory_utilization=0.3,
        server_wait_s=startup_s,
    )
    argv = [python, str(SERVER_FILE), "--model", model_dir, "--port", str(port), "--dtype", "bfloat16"]
    argv += ["--gpu-memory-utilization", "0.3", "--weight-transfer", "ipc", "--enable-sleep-mode"]
    device = torch.device(device)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpu = visible.split(",")[device.index or 0] if visible else str(device.index or 0)  # the trainer's physical GPU
    server = subprocess.Popen(argv, env=os.environ | {"CUDA_VISIBLE_DEVICES": gpu})
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(device).eval()
        engine = VLLMEngine(model, load_tokenizer(model_dir), model_path=model_dir, options=options)
        return roundtrip(engine, model, load_tokenizer(model_dir))
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
