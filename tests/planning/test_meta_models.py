"""Exact parameter counts of models built on the meta device, checked by hand."""

from __future__ import annotations

import torch

from genalign.planning.architectures import ComponentSpec, published_model
from genalign.planning.meta_models import blocks_of, build_on_meta, count_parameters

TWO_LAYER_LLAMA = ComponentSpec(
    "transformers",
    "LlamaForCausalLM",
    {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "tie_word_embeddings": False},
)  # fmt: skip


def llama_parameters_by_hand() -> int:
    hidden, inter, vocab, kv = 64, 128, 100, 2 * 16  # 2 key/value heads of 64 / 4 = 16
    attention = hidden * hidden * 2 + hidden * kv * 2  # q, o + k, v
    mlp = 3 * hidden * inter  # gate, up, down
    layer = attention + mlp + 2 * hidden  # + two RMSNorm weights
    return vocab * hidden + 2 * layer + hidden + vocab * hidden  # embeddings, layers, final norm, untied head


def test_two_layer_llama_count_is_exact_and_nothing_is_allocated():
    model = build_on_meta(TWO_LAYER_LLAMA, torch.bfloat16)
    count = count_parameters(model)
    assert count.total == llama_parameters_by_hand() == 86_848
    assert count.total_bytes == 2 * 86_848
    assert all(p.device.type == "meta" for p in model.parameters())
    assert len(blocks_of(model)) == 2  # the decoder layers (FSDP units)


def test_lora_counts_follow_the_target_modules():
    from accelerate import init_empty_weights

    from genalign.policies.lm.lora import LoRAConfig, add_lora

    model = build_on_meta(TWO_LAYER_LLAMA, torch.float32)
    with init_empty_weights(include_buffers=True):
        model = add_lora(model, LoRAConfig(rank=4, target_modules=["q_proj", "v_proj"]))
    q, v = 4 * (64 + 64), 4 * (64 + 32)  # A [r, in] + B [out, r]
    assert count_parameters(model).trainable == 2 * (q + v)


def test_published_models_are_found_by_hub_id_and_by_folder_name():
    assert published_model("Qwen/Qwen2.5-7B-Instruct") is published_model("/models/Qwen2.5-7B-Instruct")
    assert published_model("models/LLaDA-8B-Instruct").stand_in
    assert published_model("nobody/nothing") is None


def test_published_qwen25_7b_matches_its_model_card():
    model = build_on_meta(published_model("Qwen/Qwen2.5-7B-Instruct").components["model"], torch.bfloat16)
    assert count_parameters(model).total == 7_615_616_512  # model card: 7.61B
