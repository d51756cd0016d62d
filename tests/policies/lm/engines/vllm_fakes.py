"""A CPU stand-in for vLLM behind the real server code, so the client, the engine and the weight sync run end to end
without vLLM: :class:`FakeVLLMBackend` has the protocol's methods of :class:`genalign.policies.lm.engines.vllm.server.VLLMBackend`
and samples with a Hugging Face copy of the model; :class:`LoopbackSender` stands in for the NCCL / IPC channel by
handing the streamed tensors to the fake in memory.

What the fake checks, as vLLM would: sampling keys are ``vllm.SamplingParams`` fields (vllm/sampling_params.py,
0.33.0); a weight update is a start / update / finish session whose tensors match the declared metadata; every
received name is a Hugging Face checkpoint name of the model and every parameter is received (vLLM's layerwise reload
leaves unsent layers stale); adapters are peft folders loaded with ``PeftModel.from_pretrained`` (the format vLLM's
LoRA loader reads) within the server's ``max_lora_rank``.
"""

from __future__ import annotations

import base64
import copy
import json
import tempfile
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from genalign.policies.lm.engines.base import SamplingParams
from genalign.policies.lm.engines.hf import HFGenerateEngine
from genalign.policies.lm.engines.vllm.server import PROTOCOL_VERSION, make_server

#: Public fields of vLLM 0.33.0's ``SamplingParams`` (vllm/sampling_params.py).
VLLM_SAMPLING_FIELDS = frozenset(
    [
        "n",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "temperature",
        "watermarking",
        "top_p",
        "top_k",
        "min_p",
        "seed",
        "stop",
        "stop_token_ids",
        "ignore_eos",
        "max_tokens",
        "min_tokens",
        "logprobs",
        "prompt_logprobs",
        "logprob_token_ids",
        "flat_logprobs",
        "detokenize",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "include_stop_str_in_output",
        "output_kind",
        "structured_outputs",
        "logit_bias",
        "allowed_token_ids",
        "extra_args",
        "bad_words",
    ]
)


class FakeVLLMBackend:
    """The server protocol on a float32 Hugging Face copy of ``model_path`` (see the module docstring)."""

    def __init__(self, model_path: str, *, lora_enabled: bool = False, max_lora_rank: int = 16, **settings) -> None:
        from transformers import AutoModelForCausalLM

        from genalign.policies.lm.tokenizer import load_tokenizer

        self.base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.tokenizer = load_tokenizer(model_path)
        self.settings = {
            "tensor_parallel_size": 1,
            "gpu_memory_utilization": 0.9,
            "enable_prefix_caching": True,
            "lora_enabled": lora_enabled,
            "max_lora_rank": max_lora_rank if lora_enabled else 0,
            "world_size": 1,
            "dtype": "float32",
            "weight_transfer_backend": "nccl",  # what the client expects; the tensors travel by LoopbackSender
            "enable_sleep_mode": False,
        } | settings
        self.model_path = model_path
        self.server_id = uuid.uuid4().hex
        self.weight_version = "initial"
        self.adapter: str | None = None
        self.adapters: dict[str, torch.nn.Module] = {}
        self.calls: list[str] = []
        self.incoming: list[tuple[str, torch.Tensor]] = []
        self.received: set[str] = set()
        self.session = False
        self.adapter_dir = Path(tempfile.mkdtemp(prefix="fake-vllm-adapters-"))

    def restart(self) -> None:
        """What a restarted server looks like: a new id and the checkpoint's weights and no adapters again."""
        from transformers import AutoModelForCausalLM

        self.base = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32).eval()
        self.server_id, self.weight_version, self.adapter, self.adapters = uuid.uuid4().hex, "initial", None, {}

    def info(self) -> dict[str, Any]:
        self.calls.append("info")
        return {
            "protocol": PROTOCOL_VERSION,
            "server_id": self.server_id,
            "vllm_version": "0.33.0",
            "nccl_version": None,
            "model": self.model_path,
            "logprobs_mode": "processed_logprobs",
            "weight_version": self.weight_version,
            "adapter": self.adapter,
        } | self.settings

    def generate(self, prompts, sampling, seeds, adapter=None) -> dict[str, Any]:
        self.calls.append("generate")
        unknown = set(sampling) - VLLM_SAMPLING_FIELDS
        if unknown:
            raise TypeError(f"SamplingParams got unexpected keyword arguments {sorted(unknown)}")
        if sampling["top_k"] not in (0, -1) or sampling["top_p"] != 1.0 or sampling["logprobs"] != 0:
            raise ValueError("the fake implements full-vocabulary sampling with logprobs=0 only")
        if not sampling["ignore_eos"]:
            raise ValueError("the fake implements ignore_eos=True (stop_token_ids are the only end tokens)")
        if adapter is not None and adapter not in self.adapters:
            raise ValueError(f"adapter {adapter!r} is not loaded (loaded: {list(self.adapters)}).")
        model = self.adapters[adapter] if adapter is not None else self.base
        params = SamplingParams(
            max_new_tokens=sampling["max_tokens"],
            temperature=sampling["temperature"],
            eos_token_ids=tuple(sampling["stop_token_ids"] or ()),
            pad_token_id=self.tokenizer.pad_token_id,
            stop=tuple(sampling["stop"] or ()),
        )
        engine = HFGenerateEngine(model, self.tokenizer)
        outputs = []
        for prompt, seed in zip(prompts, seeds, strict=True):
            ids = torch.tensor([prompt])
            out = engine.generate(ids, torch.ones_like(ids), params, torch.Generator().manual_seed(int(seed)))
            length = int(out.completion_mask.sum())
            outputs.append(
                {
                    "token_ids": out.completion_ids[0, :length].tolist(),
                    "logprobs": out.logp[0, :length].tolist(),
                    "finish_reason": "length" if bool(out.truncated[0]) else "stop",
                }
            )
        return {"outputs": outputs, "weight_version": self.weight_version, "adapter": adapter}

    def init_weight_transfer(self, init_info) -> dict[str, Any]:
        self.calls.append("init")
        return {"status": "initialised"}

    def start_weight_update(self) -> dict[str, Any]:
        if self.session:
            raise RuntimeError("start_weight_update called while a weight update is already active")
        self.calls.append("start")
        self.session, self.received = True, set()
        return {"status": "started"}

    def update_weights(self, update_info) -> dict[str, Any]:
        if not self.session:
            raise RuntimeError("start_weight_update must be called before update_weights")
        self.calls.append("update")
        names, dtypes, shapes = update_info["names"], update_info["dtype_names"], update_info["shapes"]
        incoming, self.incoming = self.incoming, []
        if [n for n, _ in incoming] != names:
            raise ValueError("received tensors do not follow the declared names")
        params = dict(self.base.named_parameters())
        with torch.no_grad():
            for (name, tensor), dtype, shape in zip(incoming, dtypes, shapes, strict=True):
                if name not in params:
                    raise ValueError(f"{name!r} is not a checkpoint weight of the model")
                if tensor.dtype != getattr(torch, dtype) or list(tensor.shape) != shape:
                    raise ValueError(
                        f"{name!r} arrived as {tensor.dtype} {tuple(tensor.shape)}, declared {dtype} {shape}"
                    )
                params[name].copy_(tensor)
                self.received.add(name)
        return {"status": "updated"}

    def finish_weight_update(self, weight_version) -> dict[str, Any]:
        self.calls.append("finish")
        missing = set(dict(self.base.named_parameters())) - self.received
        if missing:
            raise ValueError(f"weights never received (their layers stay stale in vLLM): {sorted(missing)[:3]}")
        self.session, self.weight_version = False, weight_version
        return {"status": "finished", "weight_version": weight_version}

    def load_adapter(self, name, config, weights) -> dict[str, Any]:
        from peft import PeftModel

        self.calls.append("load_adapter")
        if not self.settings["lora_enabled"]:
            raise ValueError("this server runs without LoRA")
        if config["r"] > self.settings["max_lora_rank"]:
            raise ValueError(f"LoRA rank {config['r']} is greater than max_lora_rank {self.settings['max_lora_rank']}")
        directory = self.adapter_dir / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "adapter_config.json").write_text(json.dumps(config))
        (directory / "adapter_model.safetensors").write_bytes(base64.b64decode(weights, validate=True))
        self.adapters[name] = PeftModel.from_pretrained(copy.deepcopy(self.base), str(directory)).eval()
        self.adapter = name
        return {"status": "loaded", "adapter": name}

    def sleep(self, level: int = 1) -> None:
        self.calls.append(f"sleep{level}")

    def wake_up(self, tags=None) -> None:
        self.calls.append("wake:" + ",".join(tags or ["all"]))


class LoopbackSender:
    """The weight channel of the tests: the streamed tensors go to the fake backend's ``incoming`` list."""

    def __init__(self, backend: FakeVLLMBackend) -> None:
        self.backend = backend
        self.connects = 0
        self.versions: list[str] = []

    def connect(self, api, info) -> None:
        api.init_weight_transfer({"loopback": True})
        self.connects += 1

    def send(self, api, stream, version) -> None:
        api.start_weight_update()
        self.backend.incoming = list(stream.tensors(torch.device("cpu")))
        api.update_weights(stream.metadata())
        api.finish_weight_update(version)
        self.versions.append(version)


@contextmanager
def serving(backend):
    """The real HTTP server (:func:`make_server`) on a free local port around ``backend``; yields its URL."""
    server = make_server(backend, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
