"""The vllm engine on a real vLLM (GPU only; skipped here with the reason). What the CPU tests cannot show:

* server mode: genalign's weight sender meets vLLM's (NCCL: ``torch.cuda.nccl`` rank 0 against vLLM's unique-id
  rendezvous and broadcast, with the server on another GPU; IPC: CUDA IPC handles, with the server on the trainer's GPU
  and sleep mode), vLLM loads the pushed checkpoint names, rollout -> update -> rollout samples the new weights, an
  unchanged policy pushes nothing, and a LoRA adapter pushed over HTTP is served;
* the self-contained round trip of the GPU check (:func:`genalign.policies.lm.engines.vllm.check.weight_update_roundtrip`), which
  starts its own server with the vLLM environment's python;
* colocated mode: in-process vLLM with CUDA IPC and sleep / wake (only where vLLM's pins and genalign agree).

Commands: docs/vllm.md, "Checking on a GPU".
"""

from __future__ import annotations

import os

import pytest
import torch

from genalign.policies.lm.engines.base import SamplingParams
from genalign.policies.lm.engines.vllm.check import VLLM_PYTHON_ENV, left_padded_prompts, mean_logprob_gap, roundtrip
from genalign.policies.lm.engines.vllm.client import HTTPServerClient
from genalign.policies.lm.engines.vllm.engine import VLLMEngine
from genalign.policies.lm.engines.vllm.options import VLLMOptions

SERVER_URL = os.environ.get("GENALIGN_VLLM_SERVER_URL")
MODEL = os.environ.get("GENALIGN_VLLM_MODEL")
WHERE = "(docs/vllm.md, 'Checking on a GPU')"
needs_server = pytest.mark.skipif(
    not (torch.cuda.is_available() and SERVER_URL and MODEL),
    reason=f"needs a CUDA GPU and a running genalign vLLM server: set GENALIGN_VLLM_SERVER_URL and GENALIGN_VLLM_MODEL {WHERE}",
)


def server_options() -> VLLMOptions:
    """Options matching the running server's launch flags."""
    info = HTTPServerClient(SERVER_URL).info()
    ipc = info["weight_transfer_backend"] == "ipc"
    return VLLMOptions(
        server_url=SERVER_URL,
        weight_transfer=info["weight_transfer_backend"],
        sleep=info["enable_sleep_mode"] if ipc else None,
        tensor_parallel_size=info["tensor_parallel_size"],
        gpu_memory_utilization=info["gpu_memory_utilization"],
        enable_prefix_caching=info["enable_prefix_caching"],
    )


def load_policy_model(lora_rank: int = 0):
    from transformers import AutoModelForCausalLM

    from genalign.policies.lm.tokenizer import load_tokenizer

    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.bfloat16).cuda().eval()
    if lora_rank:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=lora_rank, target_modules=["q_proj", "v_proj"])).eval()
        with torch.no_grad():
            for param in model.parameters():
                if param.requires_grad:
                    param.add_(0.05)
    return model, load_tokenizer(MODEL)


@needs_server
def test_server_rollout_update_rollout_uses_the_new_weights():
    model, tokenizer = load_policy_model()
    engine = VLLMEngine(model, tokenizer, model_path=MODEL, options=server_options())
    figures = roundtrip(engine, model, tokenizer)
    assert figures["new_weights_seen"] and figures["mean_abs_dlogp_first_rollout"] < 0.05, figures
    ids, mask = left_padded_prompts(tokenizer, torch.device("cuda"))
    params = SamplingParams(max_new_tokens=8, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=0)
    engine.generate(ids, mask, params, torch.Generator(device="cuda").manual_seed(0))  # weights restored: push
    engine.generate(ids, mask, params, torch.Generator(device="cuda").manual_seed(0))  # unchanged: no push
    assert engine.sync.weight_pushes == figures["weight_pushes"] + 1


@needs_server
def test_server_serves_the_pushed_lora_adapter():
    if not HTTPServerClient(SERVER_URL).info()["lora_enabled"]:
        pytest.skip("start the server with --enable-lora --max-lora-rank 8 for the adapter test")
    model, tokenizer = load_policy_model(lora_rank=8)
    engine = VLLMEngine(model, tokenizer, model_path=MODEL, options=server_options())
    assert engine.sync.use_adapter
    ids, mask = left_padded_prompts(tokenizer, torch.device("cuda"))
    params = SamplingParams(max_new_tokens=16, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=0)
    generation = engine.generate(ids, mask, params, torch.Generator(device="cuda").manual_seed(0))
    assert mean_logprob_gap(model, ids, mask, generation, 1.0) < 0.05
    assert engine.sync.adapter_loads == 1


@pytest.mark.skipif(
    not (torch.cuda.is_available() and os.environ.get(VLLM_PYTHON_ENV) and MODEL),
    reason=f"needs a CUDA GPU, {VLLM_PYTHON_ENV} (the vLLM environment's python) and GENALIGN_VLLM_MODEL {WHERE}",
)
def test_gpu_check_round_trip_starts_its_own_server():
    from genalign.policies.lm.engines.vllm.check import weight_update_roundtrip

    figures = weight_update_roundtrip(MODEL, "cuda:0")
    assert figures["new_weights_seen"], figures


def test_colocated_rollout_update_rollout_uses_the_new_weights():
    from genalign.policies.lm.engines.vllm.versions import check_colocated_environment

    if not MODEL:
        pytest.skip(f"set GENALIGN_VLLM_MODEL to a model folder {WHERE}")
    try:
        check_colocated_environment()
    except (ImportError, RuntimeError) as err:
        pytest.skip(f"colocated vLLM is not possible in this environment: {err}")
    model, tokenizer = load_policy_model()
    engine = VLLMEngine(model, tokenizer, model_path=MODEL, options=VLLMOptions(mode="colocated", dtype="bfloat16"))
    figures = roundtrip(engine, model, tokenizer)
    assert figures["new_weights_seen"] and figures["mean_abs_dlogp_first_rollout"] < 0.05, figures
