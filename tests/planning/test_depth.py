"""A deep model traced through shallow copies gives the full-depth trace."""

from __future__ import annotations

import torch

from genalign.planning.architectures import ComponentSpec
from genalign.planning.depth import FULL_TRACE_BLOCKS, block_counts, traced_by_depth, with_block_counts
from genalign.planning.meta_models import build_on_meta
from genalign.planning.tracing import storage_keys, trace_peak

DEEP = ComponentSpec(
    "transformers",
    "LlamaForCausalLM",
    {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 12,
     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50, "tie_word_embeddings": False},
)  # fmt: skip


def trace(model):
    """Forward and backward of a ``[2, 96]`` batch; parameter gradients exist already (as from the second
    micro-batch on), so only activations and temporaries are counted."""
    for param in model.parameters():
        param.grad = torch.zeros_like(param)
    ids = torch.zeros(2, 96, dtype=torch.long, device="meta")
    mask = torch.ones(2, 1, 96, 96, dtype=torch.bool, device="meta")
    grads = [p.grad for p in model.parameters()]
    existing = storage_keys(model.parameters()) | storage_keys(grads) | storage_keys([mask])
    return trace_peak(
        lambda: model.model(input_ids=ids, attention_mask=mask).last_hidden_state.sum(), existing=existing
    )


def test_block_counts_and_shallow_copies():
    assert block_counts(DEEP) == {"layers": 12} and FULL_TRACE_BLOCKS < 12
    assert with_block_counts(DEEP, {"layers": 2}).config["num_hidden_layers"] == 2
    sd3 = ComponentSpec("diffusers", "SD3Transformer2DModel", {"num_layers": 24, "dual_attention_layers": [0, 1, 2]})
    assert block_counts(sd3) == {"dual": 3, "joint": 21}
    assert with_block_counts(sd3, {"dual": 1, "joint": 2}).config == {"num_layers": 3, "dual_attention_layers": [0]}


def build(spec: ComponentSpec, *, checkpointing: bool = False):
    model = build_on_meta(spec, torch.float32)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model.train()


def test_shallow_traces_extend_to_the_full_depth_trace():
    full = trace(build(DEEP, checkpointing=True))
    extended, how = traced_by_depth(DEEP, lambda spec: build(spec, checkpointing=True), trace)
    assert "extended to layers 12" in how
    assert extended == full  # with checkpointing: kept and peak both exactly linear in depth


def test_without_checkpointing_the_extension_stays_within_five_percent():
    full = trace(build(DEEP))
    extended, _ = traced_by_depth(DEEP, build, trace)
    assert extended.kept == full.kept  # saved activations are linear in depth
    assert abs(extended.peak / full.peak - 1) < 0.05  # backward keeps one more hidden state per block (depth.py)
