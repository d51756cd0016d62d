"""Parameter names of the training model -> the checkpoint names vLLM's ``load_weights`` receives.

vLLM's weight transfer delivers ``(name, tensor)`` pairs to the model's ``load_weights`` (vllm/distributed/weight_transfer/
nccl_engine.py, ``receive_weights``), which expects *checkpoint* (Hugging Face) names and maps them onto its own fused
parameters. So the trainer sends Hugging Face names, and this module removes what training wrappers add:

* peft: the ``base_model.model.`` prefix, ``.base_layer`` inside adapted layers, the adapter factors
  (``lora_A`` / ``lora_B`` / ``lora_embedding_A`` / ``lora_embedding_B`` / ``lora_magnitude_vector``, merged into the
  base weight or sent as an adapter), and ``modules_to_save`` wrappers (the trained copy ``X.modules_to_save.<adapter>.w``
  is sent as ``X.w``, the frozen ``X.original_module.w`` is dropped);
* torch: ``_fsdp_wrapped_module`` (FSDP1), ``_checkpoint_wrapped_module`` (activation checkpointing) and ``_orig_mod``
  (``torch.compile``) segments. FSDP2 (``fully_shard``) keeps names unchanged.

The facts of vLLM's side, used to check the mapping (tests/policies/lm/engines/test_vllm_weight_names.py), are encoded below with
their source (vLLM 0.33.0).
"""

from __future__ import annotations

import re

PEFT_PREFIX = "base_model.model."
WRAPPER_SEGMENTS = frozenset({"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"})
ADAPTER_SEGMENTS = frozenset(
    {"lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B", "lora_magnitude_vector", "original_module"}
)

#: Checkpoint projections that vLLM loads as shards of one fused parameter: ``LlamaModel.hf_to_vllm_mapper``
#: (vllm/model_executor/models/llama.py, ``orig_to_new_stacked``) and the identical ``Qwen2Model.hf_to_vllm_mapper``
#: (vllm/model_executor/models/qwen2.py). Value: (vLLM parameter segment, shard id).
VLLM_STACKED_PARAMS: dict[str, tuple[str, str | int]] = {
    ".q_proj": (".qkv_proj", "q"),
    ".k_proj": (".qkv_proj", "k"),
    ".v_proj": (".qkv_proj", "v"),
    ".gate_proj": (".gate_up_proj", 0),
    ".up_proj": (".gate_up_proj", 1),
}
#: LoRA's view of the same fusion (``packed_modules_mapping`` of ``LlamaForCausalLM`` / ``Qwen2ForCausalLM``).
VLLM_PACKED_MODULES = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
#: Architectures whose vLLM loaders the two tables above were read from.
VERIFIED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")
#: With ``tie_word_embeddings`` vLLM ties ``lm_head`` to ``model.embed_tokens`` and its ``AutoWeightsLoader`` skips the
#: alias (vllm/model_executor/models/utils.py, ``_get_tied_embedding_params``), as Hugging Face's
#: ``named_parameters()`` already omits it.
TIED_ALIAS = "lm_head.weight"

_MODULES_TO_SAVE = re.compile(r"\.modules_to_save\.[^.]+\.")


def checkpoint_name(name: str) -> str | None:
    """The Hugging Face checkpoint name of training parameter ``name``; None for adapter-only parameters."""
    segments = [s for s in name.split(".") if s not in WRAPPER_SEGMENTS]
    if ADAPTER_SEGMENTS.intersection(segments):
        return None
    cleaned = ".".join(s for s in segments if s != "base_layer").removeprefix(PEFT_PREFIX)
    return _MODULES_TO_SAVE.sub(".", cleaned)


def vllm_parameter_name(name: str) -> str:
    """The vLLM parameter a checkpoint name loads into, for :data:`VERIFIED_ARCHITECTURES` (used by the tests)."""
    for checkpoint, (fused, _shard) in VLLM_STACKED_PARAMS.items():
        if checkpoint + "." in name:
            return name.replace(checkpoint + ".", fused + ".", 1)
    return name
