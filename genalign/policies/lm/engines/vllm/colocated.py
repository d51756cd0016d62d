"""Colocated mode: vLLM inside the training process, sharing its GPU, weights over CUDA IPC.

Only for an environment where vLLM's pins and genalign agree (:func:`check_colocated_environment` says which version
is off and how to fix it). The in-process backend is the server's own :class:`VLLMBackend` (same generation and weight
calls as over HTTP), started with vLLM's sleep mode so the engine can give the GPU back to training between rollouts.
"""

from __future__ import annotations

import os

import torch

from genalign.policies.lm.engines.vllm.options import VLLMOptions, vllm_lora_rank
from genalign.policies.lm.engines.vllm.transfer import IPCWeightSender
from genalign.policies.lm.engines.vllm.versions import check_colocated_environment


def start_colocated(
    options: VLLMOptions, model_path: str, *, lora_rank: int, device: torch.device
) -> tuple[object, IPCWeightSender]:
    """An in-process vLLM backend for ``model_path`` and the IPC sender that feeds it."""
    check_colocated_environment()
    # The IPC handles reach vLLM's worker processes pickled (vllm/distributed/weight_transfer/ipc_engine.py,
    # IPCWeightTransferUpdateInfo); vLLM only unpickles them with this flag, set for this process and its children.
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    from genalign.policies.lm.engines.vllm.server import VLLMBackend, llm_kwargs

    use_lora = lora_rank > 0 and options.lora != "merged"
    kwargs = llm_kwargs(
        model_path,
        tensor_parallel_size=1,
        gpu_memory_utilization=options.memory_fraction(),
        enable_prefix_caching=options.enable_prefix_caching,
        dtype=options.dtype,
        enable_lora=use_lora,
        max_lora_rank=vllm_lora_rank(lora_rank) if use_lora else 16,
        enable_sleep_mode=options.sleeps(),
        weight_transfer_backend="ipc",
        seed=options.seed,
    )
    try:
        backend = VLLMBackend(kwargs)
    except ValueError as err:
        if use_lora and "support LoRA" in str(err):  # vllm/v1/worker/lora_model_runner_mixin.py
            raise ValueError(f"{err} Set policy.vllm.lora: merged to push merged weights instead.") from err
        raise
    return backend, IPCWeightSender(device)
