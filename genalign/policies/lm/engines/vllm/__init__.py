"""Rollouts through vLLM: a separate vLLM server (default) or vLLM inside the training process (docs/vllm.md).

vLLM wheels pin their own torch and transformers, which genalign's environment does not match, so the default is a
server in vLLM's own environment (:mod:`genalign.policies.lm.engines.vllm.server`, standard library + vLLM) that the trainer drives
over HTTP for generation and over vLLM's native weight transfer (NCCL, or CUDA IPC when the server shares the trainer's
GPU) for weights. Modules, one purpose each:

* :mod:`~genalign.policies.lm.engines.vllm.options`: ``policy.vllm`` and the server command it implies;
* :mod:`~genalign.policies.lm.engines.vllm.server`: the server (protocol, vLLM backend, HTTP layer, command line);
* :mod:`~genalign.policies.lm.engines.vllm.client`: the protocol over HTTP (standard library);
* :mod:`~genalign.policies.lm.engines.vllm.generation`: ``SamplingParams`` -> request, reply -> ``Generation``;
* :mod:`~genalign.policies.lm.engines.vllm.weight_names`: training parameter names -> the checkpoint names vLLM loads;
* :mod:`~genalign.policies.lm.engines.vllm.lora`: merged weights, adapter export, what vLLM's LoRA supports;
* :mod:`~genalign.policies.lm.engines.vllm.fingerprint` and :mod:`~genalign.policies.lm.engines.vllm.sync`: push only what changed;
* :mod:`~genalign.policies.lm.engines.vllm.transfer`: the trainer's half of vLLM's NCCL / CUDA-IPC weight transfer (torch only);
* :mod:`~genalign.policies.lm.engines.vllm.versions`: version and settings checks with the fix in each error;
* :mod:`~genalign.policies.lm.engines.vllm.colocated`: the in-process mode;
* :mod:`~genalign.policies.lm.engines.vllm.engine`: the :class:`~genalign.policies.lm.engines.base.RolloutEngine` that composes them;
* :mod:`~genalign.policies.lm.engines.vllm.check`: the GPU round trip (rollout -> weight update -> rollout).
"""

from genalign.policies.lm.engines.vllm.options import VLLMOptions

__all__ = ["VLLMOptions"]
