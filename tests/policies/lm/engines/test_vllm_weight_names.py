"""Training parameter names (plain, peft LoRA, modules_to_save, activation checkpointing, torch.compile) map to the
checkpoint names vLLM's loaders accept, and those land exactly on vLLM's parameters, every fused shard included.

The expected vLLM parameters are written out from vLLM 0.33.0's model classes:

* vllm/model_executor/models/llama.py: ``LlamaAttention`` has ``qkv_proj`` (bias = ``attention_bias``) and ``o_proj``
  (bias = ``attention_bias``), ``LlamaMLP`` ``gate_up_proj`` and ``down_proj`` (bias = ``mlp_bias``), the decoder layer
  ``input_layernorm`` / ``post_attention_layernorm``, ``LlamaModel`` ``embed_tokens`` / ``norm``, and ``lm_head`` unless
  ``tie_word_embeddings`` (then an alias of ``embed_tokens`` that the loader skips);
* vllm/model_executor/models/qwen2.py: the same layout with ``qkv_proj`` always biased and no other linear bias.
"""

from __future__ import annotations

import pytest
import torch

from genalign.policies.lm.engines.vllm.weight_names import VLLM_PACKED_MODULES, checkpoint_name, vllm_parameter_name

torch.set_num_threads(1)


def vllm_parameters(config, *, qkv_bias: bool, o_bias: bool, mlp_bias: bool) -> set[str]:
    names = {"model.embed_tokens.weight", "model.norm.weight"}
    if not config.tie_word_embeddings:
        names.add("lm_head.weight")
    for i in range(config.num_hidden_layers):
        layer = f"model.layers.{i}."
        names |= {layer + "input_layernorm.weight", layer + "post_attention_layernorm.weight"}
        for module, bias in [
            ("self_attn.qkv_proj", qkv_bias),
            ("self_attn.o_proj", o_bias),
            ("mlp.gate_up_proj", mlp_bias),
            ("mlp.down_proj", mlp_bias),
        ]:
            names |= {layer + module + ".weight"} | ({layer + module + ".bias"} if bias else set())
    return names


def build(architecture: str, *, tied: bool, biases: bool = False):
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    common = {"vocab_size": 40, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2}
    common |= {"num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": tied}
    if architecture == "llama":
        config = LlamaConfig(**common, attention_bias=biases, mlp_bias=biases)
        expected = vllm_parameters(config, qkv_bias=biases, o_bias=biases, mlp_bias=biases)
    else:
        config = Qwen2Config(**common)
        expected = vllm_parameters(config, qkv_bias=True, o_bias=False, mlp_bias=False)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config), expected


CASES = [("llama", False, False), ("llama", True, True), ("qwen2", True, False), ("qwen2", False, False)]


def mapped(model) -> list[str]:
    return [target for name, _ in model.named_parameters() if (target := checkpoint_name(name)) is not None]


def check_lands_on_vllm(names: list[str], expected: set[str]) -> None:
    assert len(names) == len(set(names)), "a checkpoint name is sent twice"
    assert {vllm_parameter_name(n) for n in names} == expected
    for fused, parts in VLLM_PACKED_MODULES.items():  # every shard of every fused vLLM parameter arrives
        for name in (n for n in expected if f".{fused}." in n):
            shards = {n for n in names if vllm_parameter_name(n) == name}
            assert len(shards) == len(parts), f"{name} gets {sorted(shards)}, needs one of each {parts}"


@pytest.mark.parametrize(("architecture", "tied", "biases"), CASES)
def test_plain_model_names_are_the_checkpoint_names_vllm_loads(architecture, tied, biases):
    model, expected = build(architecture, tied=tied, biases=biases)
    names = mapped(model)
    assert names == [n for n, _ in model.named_parameters()]
    check_lands_on_vllm(names, expected)


@pytest.mark.parametrize(("architecture", "tied", "biases"), CASES)
def test_peft_lora_names_map_back_to_the_checkpoint_names(architecture, tied, biases):
    from peft import LoraConfig, get_peft_model

    model, expected = build(architecture, tied=tied, biases=biases)
    plain = [n for n, _ in model.named_parameters()]
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", bias="all" if biases else "none"))
    assert any(".base_layer." in n for n, _ in peft_model.named_parameters())
    names = mapped(peft_model)
    assert names == plain
    check_lands_on_vllm(names, expected)


def test_modules_to_save_sends_the_trained_copy_under_the_original_name():
    from peft import LoraConfig, get_peft_model

    model, expected = build("llama", tied=False)
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"], modules_to_save=["lm_head"]))
    raw = [n for n, _ in peft_model.named_parameters()]
    assert any(".modules_to_save." in n for n in raw) and any(".original_module." in n for n in raw)
    names = mapped(peft_model)
    assert names.count("lm_head.weight") == 1
    check_lands_on_vllm(names, expected)


def test_activation_checkpointing_and_compile_wrappers_are_removed():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    model, expected = build("llama", tied=False)
    plain = [n for n, _ in model.named_parameters()]
    apply_activation_checkpointing(model, check_fn=lambda module: isinstance(module, LlamaDecoderLayer))
    compiled = torch.compile(model)  # wrapping only: nothing is compiled until it runs
    raw = [n for n, _ in compiled.named_parameters()]
    assert raw[0].startswith("_orig_mod.") and any("_checkpoint_wrapped_module" in n for n in raw)
    assert mapped(compiled) == plain
    check_lands_on_vllm(plain, expected)


def test_adapter_factors_are_not_checkpoint_weights():
    for name in [
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_B.default.weight",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector.default.weight",
        "base_model.model.model.embed_tokens.lora_embedding_A.default",
        "base_model.model.lm_head.original_module.weight",
    ]:
        assert checkpoint_name(name) is None
    assert (
        checkpoint_name("base_model.model.model.layers.3.mlp.up_proj.base_layer.bias")
        == "model.layers.3.mlp.up_proj.bias"
    )
