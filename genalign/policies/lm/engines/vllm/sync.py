"""Keep vLLM's weights equal to the policy's, pushing only when they differ.

Before every rollout :meth:`WeightSync.ensure_current` reads the server's state (``/info``) and compares it with the
policy's content fingerprint (:mod:`genalign.policies.lm.engines.vllm.fingerprint`):

* merged mode (no LoRA, or LoRA vLLM cannot serve): the server's ``weight_version`` must be ``genalign-<fingerprint>``
  of all parameters; otherwise every base-model weight (LoRA merged) is sent and that version committed;
* adapter mode: the base weights are sent once per server (so the server's base is the policy's even when it loaded a
  different copy), then the adapter named ``genalign-lora-<fingerprint of the adapter parameters>`` must be the server's
  current adapter; otherwise it is exported and loaded under that new name (a new vLLM adapter id per version, which
  also keeps vLLM's prefix cache, keyed by adapter, from reusing stale blocks).

Comparing with the server's reported state, not a local flag, also covers a server restart (new ``server_id``: the
transfer channel is re-opened and everything re-sent) and several trainers sharing one server.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn

from genalign.policies.lm.engines.vllm.fingerprint import fingerprint
from genalign.policies.lm.engines.vllm.lora import adapter_weights, checkpoint_weights, export_adapter
from genalign.policies.lm.engines.vllm.transfer import WeightSpec, WeightStream
from genalign.policies.lm.engines.vllm.weight_names import checkpoint_name

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
BASE_VERSION = "genalign-base"


class WeightSender(Protocol):
    def connect(self, api: Any, info: dict[str, Any]) -> None: ...
    def send(self, api: Any, stream: WeightStream, version: str) -> None: ...


def weight_stream(model: nn.Module, *, merge_adapters: bool, dtype: torch.dtype) -> WeightStream:
    """Every base-model weight of ``model`` under its checkpoint name, cast to ``dtype`` (LoRA merged if asked)."""
    specs = [
        WeightSpec(target, dtype, tuple(param.shape))
        for name, param in model.named_parameters()
        if (target := checkpoint_name(name)) is not None
    ]
    return WeightStream(specs, lambda: checkpoint_weights(model, merge_adapters=merge_adapters))


def _require_full_parameters(model: nn.Module) -> None:
    """The engine reads whole parameters; sharded ones (FSDP2 DTensors) must be gathered by the trainer first."""
    sharded = next((name for name, p in model.named_parameters() if hasattr(p, "full_tensor")), None)
    if sharded is not None:
        raise RuntimeError(
            f"parameter {sharded!r} is sharded (a DTensor): the vllm engine reads full parameters, so the trainer must "
            "call policy.rollout inside its gathered-parameters context."
        )


class WeightSync:
    """Decides and performs weight pushes for one engine.

    Args:
        model: the policy's model (a peft model in adapter mode).
        api: the server protocol (HTTP client or in-process backend).
        sender: the weight channel (NCCL or IPC).
        use_adapter: push LoRA as a vLLM adapter (True) or merged weights (False).
    """

    def __init__(self, model: nn.Module, api: Any, sender: WeightSender, *, use_adapter: bool) -> None:
        self.model = model
        self.api = api
        self.sender = sender
        self.use_adapter = use_adapter
        self.server_id: str | None = None
        self.base_sent = False
        self.weight_pushes = 0
        self.adapter_loads = 0

    def adapter_name(self) -> str:
        return "genalign-lora-" + fingerprint(adapter_weights(self.model))[:16]

    def weights_version(self) -> str:
        return "genalign-" + fingerprint(self.model.named_parameters())[:16]

    def ensure_current(self) -> str | None:
        """Push what the server lacks; return the adapter name to generate with (None in merged mode)."""
        _require_full_parameters(self.model)
        info = self.api.info()
        if info["server_id"] != self.server_id:
            self.sender.connect(self.api, info)
            self.server_id, self.base_sent = info["server_id"], False
        dtype = DTYPES[info["dtype"]]
        if not self.use_adapter:
            version = self.weights_version()
            if info["weight_version"] != version:
                self.sender.send(self.api, weight_stream(self.model, merge_adapters=True, dtype=dtype), version)
                self.weight_pushes += 1
            return None
        if not self.base_sent:
            self.sender.send(self.api, weight_stream(self.model, merge_adapters=False, dtype=dtype), BASE_VERSION)
            self.base_sent = True
            self.weight_pushes += 1
        name = self.adapter_name()
        if info["adapter"] != name:
            payload = export_adapter(self.model, dtype)
            self.api.load_adapter(name, payload.config, payload.weights)
            self.adapter_loads += 1
        return name
