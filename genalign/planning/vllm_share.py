"""The memory of ``policy.engine: vllm`` (options ``policy.vllm``, :class:`genalign.policies.lm.engines.vllm.options.VLLMOptions`).

vLLM reserves ``gpu_memory_utilization`` x the GPU's memory for its weights and KV cache (vLLM's own rule: the
fraction of the total memory its process may use).

* ``colocated``: on the training process's GPU: vLLM inside the training process, or a vLLM server on the same GPU
  receiving weights by CUDA IPC (``policy.vllm.weight_transfer`` resolves to ``ipc``). With sleep mode (the default) vLLM offloads its weights
  to CPU memory and frees its KV cache between rollouts, so its share is taken during the rollout only; without it the
  share stays reserved through the update too.
* ``server``: a vLLM server receiving weights over NCCL, on GPUs of its own (``tensor_parallel_size`` of them); the training GPUs hold nothing of it,
  but each server GPU must fit ``weights / tensor_parallel_size`` inside its share with room left for the KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class VLLMShare:
    """vLLM's share of GPU memory in a plan.

    Attributes:
        mode: ``colocated`` or ``server``; fraction: ``gpu_memory_utilization`` in effect.
        sleeps: colocated vLLM releases its share during the update.
        tensor_parallel_size: GPUs one server instance shards the model over.
        weights_per_gpu: bytes of weights each vLLM GPU holds (the policy's full weights / tensor parallel size).
    """

    mode: Literal["colocated", "server"]
    fraction: float
    sleeps: bool
    tensor_parallel_size: int
    weights_per_gpu: int

    def reserved(self, gpu_memory_bytes: float) -> float:
        """Bytes vLLM reserves on each of its GPUs."""
        return self.fraction * gpu_memory_bytes


def vllm_workload_terms(workload, policy_cfg, gpu_memory_bytes: float) -> None:
    """Record vLLM's share on ``workload`` (:class:`~genalign.planning.workload.Workload`)."""
    options = policy_cfg.vllm
    weights = sum(p.numel() * p.element_size() for p in workload.policy.parameters())
    shares_gpu = options.transfer() == "ipc"  # in-process, or a server on the trainer's GPU
    workload.vllm = VLLMShare(
        mode="colocated" if shares_gpu else "server",
        fraction=options.memory_fraction(),
        sleeps=options.sleeps(),
        tensor_parallel_size=options.tensor_parallel_size,
        weights_per_gpu=weights // options.tensor_parallel_size,
    )
    where = (
        f"on {options.tensor_parallel_size} GPU(s) of its own per server (policy.vllm.mode=server)"
        if not shares_gpu
        else "on each training process's GPU" + (", asleep during the update" if options.sleeps() else "")
    )
    workload.assumptions.append(
        f"rollout (vllm engine): vLLM reserves {options.memory_fraction():.2f} x {gpu_memory_bytes / 1e9:.0f} GB "
        f"{where}; it must hold the weights ({workload.vllm.weights_per_gpu / 1e9:.1f} GB per vLLM GPU) and its KV cache"
    )


__all__ = ["VLLMShare", "vllm_workload_terms"]
