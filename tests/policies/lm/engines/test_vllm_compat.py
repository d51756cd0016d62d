"""genalign's payloads checked against vLLM's own classes (vLLM's Python modules, no GPU and no engine needed).

Skipped unless ``vllm`` is importable. It is not installable next to genalign (conflicting pins), but its Python
sources import with genalign's torch for these checks; docs/vllm.md ("Checking against vLLM's classes without a GPU")
gives the commands (the wheel unzipped plus a few pure-Python dependencies on ``PYTHONPATH``).
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest
import torch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not importable; docs/vllm.md ('Checking against vLLM's classes without a GPU') shows how",
)

from genalign.policies.lm.engines.base import SamplingParams  # noqa: E402
from genalign.policies.lm.engines.vllm.generation import sampling_fields  # noqa: E402
from genalign.policies.lm.engines.vllm.server import build_parser, kwargs_from_args, llm_kwargs, sample_record  # noqa: E402
from genalign.policies.lm.engines.vllm.transfer import IPCWeightSender, WeightSpec, WeightStream, nccl_init_info  # noqa: E402


def stream() -> WeightStream:
    weights = [("model.a.weight", torch.ones(2, 3)), ("model.b", torch.zeros(4))]
    specs = [WeightSpec("model.a.weight", torch.bfloat16, (2, 3)), WeightSpec("model.b", torch.float32, (4,))]
    return WeightStream(specs, lambda: iter(weights))


def test_sampling_fields_build_vllm_sampling_params():
    from vllm import SamplingParams as VLLMSamplingParams

    plain = VLLMSamplingParams(**sampling_fields(SamplingParams(max_new_tokens=7, eos_token_ids=(2, 9))), seed=3)
    assert (plain.logprobs, plain.ignore_eos, plain.stop_token_ids, plain.max_tokens, plain.seed) == (
        0,
        True,
        [2, 9],
        7,
        3,
    )
    stops = VLLMSamplingParams(**sampling_fields(SamplingParams(max_new_tokens=7, stop=("STOP",))), seed=1)
    assert stops.stop == ["STOP"] and stops.detokenize and not stops.skip_special_tokens


def test_nccl_payloads_parse_as_vllm_init_and_update_info():
    from vllm.distributed.weight_transfer.nccl_common import NCCLWeightTransferInitInfo
    from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferUpdateInfo

    init = NCCLWeightTransferInitInfo(**nccl_init_info(bytes(range(128)), 3))
    assert (init.rank_offset, init.world_size, init.nccl_unique_id_bytes, init.packed) == (
        1,
        3,
        bytes(range(128)),
        False,
    )
    update = NCCLWeightTransferUpdateInfo(**stream().metadata())
    assert [getattr(torch, name) for name in update.dtype_names] == [torch.bfloat16, torch.float32]


def test_ipc_payload_parses_as_vllm_update_info(monkeypatch):
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    from vllm.distributed.weight_transfer.ipc_engine import IPCWeightTransferInitInfo, IPCWeightTransferUpdateInfo

    class API:
        def init_weight_transfer(self, info):
            self.init = info

        def start_weight_update(self): ...

        def update_weights(self, update):
            self.update = update

        def finish_weight_update(self, version): ...

    api = API()
    sender = IPCWeightSender(torch.device("cpu"), export=lambda t: {"GPU-0": ("args", tuple(t.shape))})
    sender.connect(api, {})
    sender.send(api, stream(), "v")
    assert IPCWeightTransferInitInfo(**api.init).packed is False
    update = IPCWeightTransferUpdateInfo(**api.update)
    assert update.ipc_handles == [{"GPU-0": ("args", (2, 3))}, {"GPU-0": ("args", (4,))}]


def test_server_reads_vllm_completion_outputs():
    from vllm.logprobs import Logprob
    from vllm.outputs import CompletionOutput

    logprobs = [{5: Logprob(-0.5), 8: Logprob(-0.1)}, {6: Logprob(-1.25)}]
    out = CompletionOutput(
        index=0, text="", token_ids=[5, 6], cumulative_logprob=None, logprobs=logprobs, finish_reason="stop"
    )
    assert sample_record(out) == {"token_ids": [5, 6], "logprobs": [-0.5, -1.25], "finish_reason": "stop"}


def test_server_kwargs_are_vllm_engine_args(tmp_path):
    from vllm.engine.arg_utils import EngineArgs

    from genalign.policies.lm.tiny import build_tiny_causal_lm

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = str(build_tiny_causal_lm(tmp_path / "m", vocab_size=96))
    served = EngineArgs(**kwargs_from_args(build_parser().parse_args(["--model", model, "--enable-lora"])))
    assert (served.weight_transfer_config.backend, served.logprobs_mode, served.enable_lora) == (
        "nccl",
        "processed_logprobs",
        True,
    )
    colocated = EngineArgs(**llm_kwargs(model, enable_sleep_mode=True, weight_transfer_backend="ipc"))
    assert colocated.enable_sleep_mode and colocated.weight_transfer_config.backend == "ipc"


@pytest.mark.parametrize(
    "options",
    [{}, {"use_rslora": True}, {"use_dora": True}, {"bias": "all"}, {"init_lora_weights": "pissa"}],
    ids=["lora", "rslora", "dora", "bias", "pissa"],
)
def test_adapter_rules_agree_with_vllm_peft_helper(options):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, LlamaConfig
    from vllm.config.lora import LoRAConfig
    from vllm.lora.peft_helper import PEFTHelper

    from genalign.policies.lm.engines.vllm.lora import adapter_unsupported_reason, export_adapter

    config = LlamaConfig(
        vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=4
    )
    model = get_peft_model(
        AutoModelForCausalLM.from_config(config), LoraConfig(r=8, target_modules="all-linear", **options)
    )
    exported = json.loads(json.dumps(export_adapter(model, torch.bfloat16).config))
    try:
        PEFTHelper.from_dict(exported).validate_legal(LoRAConfig(max_lora_rank=16))
        vllm_accepts = True
    except ValueError:
        vllm_accepts = False
    assert (adapter_unsupported_reason(model, max_lora_rank=16) is None) == vllm_accepts


def test_stacked_names_are_vllm_llama_and_qwen2_mappers():
    from vllm.model_executor.models.llama import LlamaForCausalLM, LlamaModel
    from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM, Qwen2Model

    from genalign.policies.lm.engines.vllm.weight_names import (
        VLLM_PACKED_MODULES,
        VLLM_STACKED_PARAMS,
        vllm_parameter_name,
    )

    names = ["model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.bias", "model.norm.weight"]
    names += ["model.layers.1.mlp.up_proj.weight", "model.layers.1.mlp.down_proj.weight"]
    for model, causal_lm in [(LlamaModel, LlamaForCausalLM), (Qwen2Model, Qwen2ForCausalLM)]:
        assert model.hf_to_vllm_mapper.orig_to_new_stacked == VLLM_STACKED_PARAMS
        assert causal_lm.packed_modules_mapping == VLLM_PACKED_MODULES
        assert [model.hf_to_vllm_mapper.map_name(n) for n in names] == [vllm_parameter_name(n) for n in names]
