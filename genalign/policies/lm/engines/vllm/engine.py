"""The ``vllm`` rollout engine: a :class:`~genalign.policies.lm.engines.base.RolloutEngine` on a vLLM server or colocated vLLM.

One :meth:`VLLMEngine.generate` call:

1. draws one seed per row and builds the request (:mod:`genalign.policies.lm.engines.vllm.generation`);
2. (sleep mode: vLLM on the trainer's GPU) wakes vLLM's weights;
3. makes vLLM's weights current (:class:`~genalign.policies.lm.engines.vllm.sync.WeightSync`: nothing is sent when the policy's
   fingerprint matches what vLLM holds). With several training processes sharing one server, rank 0 leads (wakes,
   pushes, puts to sleep) and every rank waits at a barrier before generating; colocated, each process feeds its own vLLM;
4. (sleep mode) wakes the KV cache, generates, and puts vLLM back to sleep (level 1);
5. turns the reply into completions, masks and behaviour log-probs at the sampling temperature.

vLLM's kernels differ from the training forward, so its log-probs differ slightly from ``score``; the causal-LM
family re-scores rollouts (``rollout_logp_is_exact = False``) and the recorded ones feed the mismatch corrections.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor, nn

from genalign.policies.lm.engines.base import Generation, SamplingParams, StopStringMatcher
from genalign.policies.lm.engines.vllm.client import HTTPServerClient, VLLMServerError
from genalign.policies.lm.engines.vllm.generation import build_generate_request, parse_generate_response
from genalign.policies.lm.engines.vllm.lora import adapter_unsupported_reason, lora_rank_of
from genalign.policies.lm.engines.vllm.options import VLLMOptions, server_command
from genalign.policies.lm.engines.vllm.sync import WeightSender, WeightSync
from genalign.policies.lm.engines.vllm.transfer import IPCWeightSender, NCCLWeightSender
from genalign.policies.lm.engines.vllm.versions import check_server_info, check_server_settings


def choose_adapter_mode(options: VLLMOptions, model: nn.Module, info: dict[str, Any]) -> bool:
    """Whether LoRA goes to vLLM as an adapter (True) or as merged weights (False), per ``policy.vllm.lora``."""
    if lora_rank_of(model) == 0 or options.lora == "merged":
        return False
    if not info.get("lora_enabled"):
        if options.lora == "adapter":
            raise ValueError(
                "policy.vllm.lora=adapter but vLLM runs without LoRA; start it with --enable-lora, or set "
                "policy.vllm.lora: auto / merged."
            )
        return False
    reason = adapter_unsupported_reason(model, max_lora_rank=int(info.get("max_lora_rank", 0)))
    if reason is not None and options.lora == "adapter":
        raise ValueError(f"policy.vllm.lora=adapter but vLLM cannot serve this adapter: {reason}. Set lora: merged.")
    if reason is not None:
        warnings.warn(
            f"policy.vllm.lora=auto: pushing merged weights, vLLM cannot serve the adapter: {reason}.", stacklevel=2
        )
    return reason is None


def _distributed() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class VLLMEngine:
    """Samples through vLLM and keeps vLLM's weights equal to the policy's.

    Args:
        model: the policy's causal LM or peft model; read (never modified) before each rollout.
        tokenizer: the policy tokenizer (stop-string rule of :func:`finalize_completions`).
        model_path: the base model vLLM loads (the server's ``--model``).
        options: ``policy.vllm``.
        api, sender: an already started backend and weight channel (tests, custom launchers); by default they are
            built from ``options``: an HTTP client + NCCL or CUDA IPC for a server, an in-process vLLM + CUDA IPC
            colocated.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        *,
        model_path: str,
        options: VLLMOptions,
        api: Any = None,
        sender: WeightSender | None = None,
    ) -> None:
        options.validate()
        self.model = model
        self.tokenizer = tokenizer
        self.options = options
        device = next(model.parameters()).device
        lora_rank = lora_rank_of(model)
        if api is None:
            api, sender = self._start(options, model_path, lora_rank, device)
        assert sender is not None, "an api needs its weight sender"
        self.api = api
        info = api.info()
        local_nccl = tuple(torch.cuda.nccl.version()[:3]) if torch.cuda.is_available() else None
        check_server_info(info, local_nccl=local_nccl)
        if options.mode == "server":
            check_server_settings(info, options, model_path=model_path, lora_rank=lora_rank)
        self.sync = WeightSync(model, api, sender, use_adapter=choose_adapter_mode(options, model, info))
        self.shared = options.mode == "server"
        if options.sleeps() and (not self.shared or _distributed()[0] == 0):
            api.sleep(1)  # training runs first; the first rollout wakes vLLM

    @staticmethod
    def _start(options: VLLMOptions, model_path: str, lora_rank: int, device: torch.device) -> tuple[Any, Any]:
        if options.mode == "colocated":
            from genalign.policies.lm.engines.vllm.colocated import start_colocated

            return start_colocated(options, model_path, lora_rank=lora_rank, device=device)
        client = HTTPServerClient(
            options.server_url, timeout_s=options.request_timeout_s, max_response_mb=options.max_response_mb
        )
        try:
            client.wait_until_healthy(options.server_wait_s)
        except VLLMServerError as err:
            raise RuntimeError(
                f"engine='vllm' (policy.vllm.mode=server) found no genalign vLLM server: {err}. Start one in the vLLM "
                f"environment (docs/vllm.md): {server_command(options, model_path, lora_rank=lora_rank)} ; raise "
                "policy.vllm.server_wait_s to wait for it, or use engine='static' / engine='hf' without a GPU."
            ) from None
        sender = NCCLWeightSender(device) if options.transfer() == "nccl" else IPCWeightSender(device)
        return client, sender

    def _make_current(self, leader: bool) -> str | None:
        """Wake vLLM if it sleeps, push what changed (the leader) and return the adapter to generate with."""
        sleeps = self.options.sleeps()
        if leader and sleeps:
            self.api.wake_up(["weights"])  # weights first, so the push does not compete with the KV cache for memory
        if leader:
            adapter = self.sync.ensure_current()
        else:
            adapter = self.sync.adapter_name() if self.sync.use_adapter else None
        if leader and sleeps:
            self.api.wake_up(["kv_cache"])
        return adapter

    @torch.no_grad()
    def generate(
        self, prompt_ids: Tensor, prompt_mask: Tensor, params: SamplingParams, generator: torch.Generator
    ) -> Generation:
        """Sample one completion per row of ``prompt_ids`` ``[B, P]`` (left-padded, ``prompt_mask`` ``[B, P]``)."""
        request = build_generate_request(prompt_ids, prompt_mask, params, generator)
        rank, world = _distributed()
        together = self.shared and world > 1  # ranks sharing one server: rank 0 leads, the others wait for it
        leader = not together or rank == 0
        adapter = self._make_current(leader)
        if together:
            torch.distributed.barrier()  # no rank generates before the leader's push is committed
        try:
            response = self.api.generate(**request, adapter=adapter)
        finally:
            if self.options.sleeps():
                if together:
                    torch.distributed.barrier()  # every rank's generation is done before vLLM sleeps
                if leader:
                    self.api.sleep(1)
        matcher = StopStringMatcher(self.tokenizer, params.stop)
        return parse_generate_response(response, params, matcher, batch=prompt_ids.shape[0], device=prompt_ids.device)
