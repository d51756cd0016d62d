"""LoRA for vLLM: merged weights equal peft's merge (plain LoRA, rsLoRA, DoRA, trained biases, modules_to_save) and
give the peft model's forward, without touching the training weights; the exported adapter reloads in peft with the
same forward; the rules for what vLLM can serve as an adapter."""

from __future__ import annotations

import base64
import copy
import json

import pytest
import torch

from genalign.policies.lm.engines.vllm.lora import adapter_unsupported_reason, checkpoint_weights, export_adapter
from genalign.policies.lm.engines.vllm.options import vllm_lora_rank

torch.set_num_threads(1)
IDS = torch.tensor([[3, 7, 11, 2, 9], [5, 5, 1, 30, 12]])


def tiny(architecture: str = "llama", *, biases: bool = False):
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    common = {"vocab_size": 40, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2}
    common |= {"num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": architecture == "qwen2"}
    config = LlamaConfig(**common, attention_bias=biases) if architecture == "llama" else Qwen2Config(**common)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


def trained_lora(architecture: str = "llama", **lora_options):
    """A peft model whose adapters are far from their no-op initialisation (as after training)."""
    from peft import LoraConfig, get_peft_model

    biases = lora_options.get("bias", "none") != "none"
    options = {"r": 4, "lora_alpha": 8, "target_modules": "all-linear"} | lora_options
    model = get_peft_model(tiny(architecture, biases=biases), LoraConfig(**options)).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _name, param in model.named_parameters():
            if param.requires_grad:  # adapters, magnitudes, trained biases and modules_to_save copies
                param.add_(0.2 * torch.randn(param.shape, generator=generator))
    return model


VARIANTS = {
    "lora": {},
    "rslora": {"use_rslora": True},
    "dora": {"use_dora": True},
    "biases": {"bias": "all"},
    "modules_to_save": {"target_modules": ["q_proj", "v_proj"], "modules_to_save": ["lm_head"]},
}


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_merged_weights_equal_peft_merge_and_give_the_peft_forward(architecture, variant):
    if variant == "modules_to_save" and architecture == "qwen2":
        pytest.skip("a modules_to_save copy of a tied lm_head is not a separate checkpoint weight")
    model = trained_lora(architecture, **VARIANTS[variant])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        expected_logits = model(input_ids=IDS).logits
    merged = dict(checkpoint_weights(model, merge_adapters=True))

    reference = copy.deepcopy(model).merge_and_unload()
    assert list(merged) == [n for n, _ in reference.named_parameters()]
    for name, tensor in reference.named_parameters():
        torch.testing.assert_close(merged[name], tensor.detach(), rtol=0, atol=1e-6, msg=name)

    plain = tiny(architecture, biases=variant == "biases")
    plain.load_state_dict(merged, strict=False)
    missing = set(dict(plain.named_parameters())) - set(merged)
    assert not missing, f"merged weights miss {sorted(missing)}"
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=IDS).logits, expected_logits, rtol=0, atol=1e-5)
    for name, param in model.named_parameters():  # out of place: the training weights are bit for bit unchanged
        assert torch.equal(param, before[name]), name


def test_unmerged_checkpoint_weights_are_the_base_weights():
    model = trained_lora("llama")
    base = dict(checkpoint_weights(model, merge_adapters=False))
    with model.disable_adapter(), torch.no_grad():
        expected = model(input_ids=IDS).logits
    plain = tiny("llama")
    plain.load_state_dict(base)
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=IDS).logits, expected, rtol=0, atol=1e-6)


def test_exported_adapter_reloads_in_peft_with_the_same_forward(tmp_path):
    from peft import PeftModel

    model = trained_lora("qwen2", use_rslora=True)
    payload = export_adapter(model, torch.float32)
    config = json.loads(json.dumps(payload.config))  # what travels over HTTP
    assert config["r"] == 4 and config["use_rslora"] is True and isinstance(config["target_modules"], list)
    (tmp_path / "adapter_config.json").write_text(json.dumps(config))
    (tmp_path / "adapter_model.safetensors").write_bytes(base64.b64decode(payload.weights))
    reloaded = PeftModel.from_pretrained(tiny("qwen2"), str(tmp_path)).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=IDS).logits, model(input_ids=IDS).logits, rtol=0, atol=1e-6)


def test_exported_adapter_is_cast_to_the_server_dtype():
    from safetensors.torch import load

    payload = export_adapter(trained_lora("llama"), torch.bfloat16)
    tensors = load(base64.b64decode(payload.weights))
    assert tensors and all(t.dtype == torch.bfloat16 for t in tensors.values())
    assert all(".lora_A.weight" in k or ".lora_B.weight" in k for k in tensors)  # peft's saved names


@pytest.mark.parametrize(
    ("options", "max_rank", "reason"),
    [
        ({}, 16, None),
        ({"use_rslora": True}, 16, None),
        ({"init_lora_weights": "gaussian"}, 16, None),
        ({"use_dora": True}, 16, "DoRA"),
        ({"bias": "all"}, 16, "bias='all'"),
        ({"modules_to_save": ["lm_head"], "target_modules": ["q_proj"]}, 16, "modules_to_save"),
        ({"init_lora_weights": "pissa"}, 16, "init_lora_weights='pissa'"),
        ({}, 1, "rank 4 exceeds the server's max_lora_rank=1"),
        ({"rank_pattern": {"q_proj": 32}}, 16, "rank 32 exceeds"),
    ],
)
def test_what_vllm_can_serve_as_an_adapter(options, max_rank, reason):
    got = adapter_unsupported_reason(trained_lora("llama", **options), max_lora_rank=max_rank)
    assert (got is None) if reason is None else (reason in got), got


def test_vllm_lora_rank_is_the_smallest_accepted_rank():
    assert [vllm_lora_rank(r) for r in (1, 4, 8, 16, 17, 64, 300)] == [1, 8, 8, 16, 32, 64, 320]
    with pytest.raises(ValueError, match=r"policy\.lora\.rank=600 exceeds vLLM's largest max_lora_rank 512"):
        vllm_lora_rank(600)
