"""Rollouts through vLLM (optional, GPU only, imported lazily).

Install with ``pip install genalign[vllm]``. The engine runs vLLM in the training process ("colocated") and, before
each rollout, copies the policy's current weights into vLLM's model (``load_weights``), so samples always come from the
current parameters. LoRA is merged on the fly for the copy. vLLM computes its own kernels, so its behaviour log-probs
differ slightly from :meth:`CausalLMPolicy.score`; the policy re-scores rollouts (``rollout_logp_is_exact = False``),
and the gap measures the training/inference mismatch.

This back-end cannot be exercised on a CPU-only machine; only its import guards are tested here.
"""

from __future__ import annotations

import importlib.util

import torch
from torch import Tensor, nn

from genalign.engines.base import Generation, SamplingParams, StopStringMatcher, finalize_completions


def _require_vllm():
    if importlib.util.find_spec("vllm") is None:
        raise ImportError(
            "engine='vllm' needs the vllm package: pip install 'genalign[vllm]' (GPU only), or use engine='static' / 'hf'."
        )
    if not torch.cuda.is_available():
        raise RuntimeError("engine='vllm' needs a CUDA GPU; on CPU use engine='static' or engine='hf'.")
    import vllm

    return vllm


class VLLMEngine:
    """Colocated vLLM sampler.

    Args:
        model: the policy's causal LM (or peft model); its weights are pushed to vLLM before each rollout.
        tokenizer: the policy tokenizer (stop-string post-processing).
        model_path: the path vLLM loads the architecture and initial weights from.
        gpu_memory_utilization: fraction of GPU memory vLLM may reserve.
    """

    def __init__(self, model: nn.Module, tokenizer, *, model_path: str, gpu_memory_utilization: float = 0.3) -> None:
        vllm = _require_vllm()
        self.vllm = vllm
        self.model = model
        self.tokenizer = tokenizer
        self.llm = vllm.LLM(model=model_path, gpu_memory_utilization=gpu_memory_utilization, enable_prefix_caching=True)

    def _push_weights(self) -> None:
        is_peft = hasattr(self.model, "merge_adapter")
        if is_peft:  # merge the adapters into the base weights for the copy, unmerge afterwards
            self.model.merge_adapter()
        try:
            prefix = "base_model.model."
            weights = [
                (name.removeprefix(prefix).replace(".base_layer", ""), tensor)
                for name, tensor in self.model.state_dict().items()
                if "lora_" not in name
            ]
            runner = self.llm.llm_engine.model_executor.driver_worker.worker.model_runner
            runner.model.load_weights(weights)
        finally:
            if is_peft:
                self.model.unmerge_adapter()

    @torch.no_grad()
    def generate(
        self, prompt_ids: Tensor, prompt_mask: Tensor, params: SamplingParams, generator: torch.Generator
    ) -> Generation:
        self._push_weights()
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
        sampling = self.vllm.SamplingParams(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            max_tokens=params.max_new_tokens,
            stop=list(params.stop) or None,
            stop_token_ids=list(params.eos_token_ids) or None,
            logprobs=0,
            seed=seed,
        )
        prompts = [
            {"prompt_token_ids": ids[mask.bool()].tolist()} for ids, mask in zip(prompt_ids, prompt_mask, strict=True)
        ]
        outputs = self.llm.generate(prompts, sampling, use_tqdm=False)
        width = max(len(out.outputs[0].token_ids) for out in outputs)
        raw_ids = torch.full((len(outputs), max(width, 1)), params.pad_token_id, dtype=torch.long)
        raw_logp = torch.zeros(len(outputs), max(width, 1))
        for row, out in enumerate(outputs):
            sample = out.outputs[0]
            raw_ids[row, : len(sample.token_ids)] = torch.tensor(sample.token_ids)
            for column, (token, entry) in enumerate(zip(sample.token_ids, sample.logprobs or [], strict=False)):
                raw_logp[row, column] = entry[token].logprob
        matcher = StopStringMatcher(self.tokenizer, params.stop)
        return finalize_completions(raw_ids.to(prompt_ids.device), raw_logp.to(prompt_ids.device), params, matcher)
