"""A lean forward pass of Llama-family weights (Llama, Qwen2) over a preallocated key/value cache.

Hugging Face ``generate`` spends most of a small model's decode step in Python: cache objects, mask construction,
logits processors and stopping criteria run for every token. This module calls the model's own sub-modules (embedding,
RMS norms, projections, MLP, head; so LoRA layers injected by peft apply unchanged) and does only the attention itself:
rotary embedding, a write into a static cache ``[layers, B, kv_heads, capacity, head_dim]`` and one scaled-dot-product
attention call. Tests check its logits against the Hugging Face forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")


def unsupported_reason(causal_lm: nn.Module) -> str | None:
    """Why :class:`LeanDecoder` cannot run ``causal_lm`` (``None`` when it can)."""
    config = causal_lm.config
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        return f"model_type {config.model_type!r} is not one of {SUPPORTED_MODEL_TYPES}"
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    if any(kind != "full_attention" for kind in layer_types):
        return f"layer_types {sorted(set(layer_types))} include sliding-window attention"
    return None


@dataclass
class StaticKVCache:
    """Keys and values ``[layers, B, kv_heads, capacity, head_dim]`` plus which columns hold real tokens ``[B, capacity]``."""

    keys: Tensor
    values: Tensor
    key_mask: Tensor

    def select_rows(self, rows: Tensor) -> StaticKVCache:
        """Keep only batch rows ``rows`` ``[B']`` (used to drop finished samples)."""
        return StaticKVCache(self.keys[:, rows], self.values[:, rows], self.key_mask[rows])


def _rotate_half(x: Tensor) -> Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class LeanDecoder:
    """Runs a Llama-family causal LM chunk by chunk over a :class:`StaticKVCache`.

    Args:
        causal_lm: the ``*ForCausalLM`` module, or a peft model around it (its injected LoRA layers apply).
    """

    def __init__(self, causal_lm: nn.Module) -> None:
        causal_lm = causal_lm.get_base_model() if hasattr(causal_lm, "get_base_model") else causal_lm
        reason = unsupported_reason(causal_lm)
        if reason is not None:
            raise ValueError(f"engine='static' cannot run this model: {reason}. Use engine='hf' instead.")
        self.causal_lm = causal_lm
        self.backbone = causal_lm.base_model
        self.lm_head = causal_lm.get_output_embeddings()
        attention = self.backbone.layers[0].self_attn
        config = causal_lm.config
        self.head_dim = attention.head_dim
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads

    def allocate(self, batch: int, capacity: int, device: torch.device, dtype: torch.dtype) -> StaticKVCache:
        shape = (len(self.backbone.layers), batch, self.num_kv_heads, capacity, self.head_dim)
        return StaticKVCache(
            keys=torch.zeros(shape, device=device, dtype=dtype),
            values=torch.zeros(shape, device=device, dtype=dtype),
            key_mask=torch.zeros(batch, capacity, device=device, dtype=torch.bool),
        )

    def forward(
        self, tokens: Tensor, positions: Tensor, token_mask: Tensor, cache: StaticKVCache, start: int
    ) -> Tensor:
        """Feed ``tokens`` ``[B, S]`` written to cache columns ``[start, start + S)``.

        Args:
            tokens: ``[B, S]`` token ids.
            positions: ``[B, S]`` rotary positions.
            token_mask: ``[B, S]`` bool, False for padding tokens (never attended to by later tokens).
            cache: the cache, updated in place.
            start: first cache column written.

        Returns:
            ``[B, V]`` logits of the last position (the next-token distribution).
        """
        batch, length = tokens.shape
        end = start + length
        cache.key_mask[:, start:end] = token_mask
        columns = torch.arange(end, device=tokens.device)  # [end]
        query_columns = torch.arange(start, end, device=tokens.device)  # [S]
        causal = columns[None, :] <= query_columns[:, None]  # [S, end]
        # A padding query may attend to itself only, so that no row is fully masked (which would give NaN).
        attend = (causal[None] & cache.key_mask[:, None, :end]) | (
            columns[None, None, :] == query_columns[None, :, None]
        )
        attend = attend[:, None]  # [B, 1, S, end]

        hidden = self.backbone.embed_tokens(tokens)  # [B, S, H]
        cos, sin = self.backbone.rotary_emb(hidden, positions)  # [B, S, D] each
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, S, D]
        for index, layer in enumerate(self.backbone.layers):
            attention = layer.self_attn
            normed = layer.input_layernorm(hidden)  # [B, S, H]
            q = attention.q_proj(normed).view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)
            k = attention.k_proj(normed).view(batch, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
            v = attention.v_proj(normed).view(batch, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin  # [B, heads, S, D]
            k = k * cos + _rotate_half(k) * sin  # [B, kv_heads, S, D]
            cache.keys[index, :, :, start:end] = k
            cache.values[index, :, :, start:end] = v
            out = F.scaled_dot_product_attention(
                q,
                cache.keys[index, :, :, :end],
                cache.values[index, :, :, :end],
                attn_mask=attend,
                scale=attention.scaling,
                enable_gqa=self.num_heads != self.num_kv_heads,
            )  # [B, heads, S, D]
            hidden = hidden + attention.o_proj(out.transpose(1, 2).reshape(batch, length, -1))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        last = self.backbone.norm(hidden[:, -1])  # [B, H]
        return self.lm_head(last)  # [B, V]
