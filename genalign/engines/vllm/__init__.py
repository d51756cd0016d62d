"""Rollouts through vLLM: a separate vLLM server (default) or vLLM inside the training process (docs/vllm.md).

vLLM wheels pin their own torch and transformers, which genalign's environment does not match, so the default is a
server in vLLM's own environment (:mod:`genalign.engines.vllm.server`, standard library + vLLM) that the trainer drives
over HTTP for generation and over vLLM's native weight transfer (NCCL, or CUDA IPC when the server shares the trainer's
GPU) for weights. Modules, one purpose each:

* :mod:`~genalign.engines.vllm.options`: ``policy.vllm`` and the server command it implies;
* :mod:`~genalign.engines.vllm.server`: the server (protocol, vLLM backend, HTTP layer, command line);
* :mod:`~genalign.engines.vllm.client`: the protocol over HTTP (standard library);
* :mod:`~genalign.engines.vllm.generation`: ``SamplingParams`` -> request, reply -> ``Generation``;
* :mod:`~genalign.engines.vllm.weight_names`: training parameter names -> the checkpoint names vLLM loads;
* :mod:`~genalign.engines.vllm.lora`: merged weights, adapter export, what vLLM's LoRA supports;
* :mod:`~genalign.engines.vllm.fingerprint` and :mod:`~genalign.engines.vllm.sync`: push only what changed;
* :mod:`~genalign.engines.vllm.transfer`: the trainer's half of vLLM's NCCL / CUDA-IPC weight transfer (torch only);
* :mod:`~genalign.engines.vllm.versions`: version and settings checks with the fix in each error;
* :mod:`~genalign.engines.vllm.colocated`: the in-process mode;
* :mod:`~genalign.engines.vllm.engine`: the :class:`~genalign.engines.base.RolloutEngine` that composes them;
* :mod:`~genalign.engines.vllm.check`: the GPU round trip (rollout -> weight update -> rollout).
"""

from genalign.engines.vllm.options import VLLMOptions

__all__ = ["VLLMOptions"]
