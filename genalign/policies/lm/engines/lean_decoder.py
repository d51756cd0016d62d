"""A lean forward pass of decoder-only transformers (Llama, Qwen2, Qwen3, Qwen3-MoE, Gemma3) over a preallocated
key/value cache.

Hugging Face ``generate`` spends most of a small model's decode step in Python: cache objects, mask construction,
logits processors and stopping criteria run for every token. This module calls the model's own sub-modules (embedding,
RMS norms, projections, MLP or mixture-of-experts block, head; so LoRA layers injected by peft apply unchanged) and
does only the attention itself: rotary embedding, a write into a static cache ``[layers, B, kv_heads, capacity,
head_dim]`` and one scaled-dot-product attention call. What differs between the architectures is declared per
``model_type`` in :data:`LAYOUTS` (:class:`DecoderLayout`); the sliding window of a layer (Gemma3's local layers, a
Qwen config with ``use_sliding_window``) and the final logit soft-capping come from the model's config. Tests check its
logits against the Hugging Face forward for every architecture of :data:`LAYOUTS`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class DecoderLayout:
    """How one architecture's decoder layer is wired, beyond the Llama layout (pre-norm attention and MLP, rotary
    embedding shared by all layers).

    Attributes:
        qk_norm: an RMS norm over each head's queries and keys before the rotary embedding (``q_norm``, ``k_norm``:
            Qwen3, Qwen3-MoE, Gemma3).
        sandwich_norms: the attention and MLP outputs are normed before the residual add, and the MLP input by its own
            norm (``post_attention_layernorm`` on the attention output, ``pre_feedforward_layernorm``,
            ``post_feedforward_layernorm``: Gemma3).
        rope_per_layer_type: the rotary embedding is called with the layer's type (``rotary_emb(x, positions,
            layer_type)``: Gemma3's local and global layers have different bases).
    """

    qk_norm: bool = False
    sandwich_norms: bool = False
    rope_per_layer_type: bool = False


#: The architectures the lean decoder runs, by ``config.model_type``. A mixture-of-experts block is called like an MLP
#: (``layer.mlp``), so Qwen3-MoE differs from Qwen3 only in its MLP module.
LAYOUTS: dict[str, DecoderLayout] = {
    "llama": DecoderLayout(),
    "qwen2": DecoderLayout(),
    "qwen3": DecoderLayout(qk_norm=True),
    "qwen3_moe": DecoderLayout(qk_norm=True),
    "gemma3_text": DecoderLayout(qk_norm=True, sandwich_norms=True, rope_per_layer_type=True),
}
SUPPORTED_MODEL_TYPES = tuple(LAYOUTS)


def unsupported_reason(causal_lm: nn.Module) -> str | None:
    """Why :class:`LeanDecoder` cannot run ``causal_lm`` (``None`` when it can)."""
    config = causal_lm.config
    if config.model_type not in LAYOUTS:
        return f"model_type {config.model_type!r} is not one of {SUPPORTED_MODEL_TYPES}"
    if getattr(config, "use_bidirectional_attention", False):
        return "use_bidirectional_attention=true makes it an encoder, not a left-to-right sampler"
    if getattr(config, "attn_logit_softcapping", None) is not None:
        return (
            f"attn_logit_softcapping={config.attn_logit_softcapping} caps the attention scores, which the fused "
            "attention kernel cannot"
        )
    return None


def layer_windows(config) -> list[int | None]:
    """The sliding window of each layer (``None``: full attention), as transformers masks them: a query at cache
    column ``q`` attends to columns ``k`` with ``q - window < k <= q``."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if types is None:  # one window for every layer (Qwen3-MoE: set only with use_sliding_window)
        return [window] * config.num_hidden_layers
    return [window if kind == "sliding_attention" else None for kind in types]


def soft_cap(logits: Tensor, cap: float | None) -> Tensor:
    """``cap · tanh(logits / cap)`` (Gemma's final logit soft-capping), ``logits`` unchanged for ``cap=None``."""
    return logits if cap is None else torch.tanh(logits / cap) * cap


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
    """Runs a causal LM of :data:`LAYOUTS` chunk by chunk over a :class:`StaticKVCache`.

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
        config = causal_lm.config
        self.layout = LAYOUTS[config.model_type]
        attention = self.backbone.layers[0].self_attn
        self.head_dim = attention.head_dim
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.windows = layer_windows(config)  # [layers] window or None
        self.layer_types = getattr(config, "layer_types", None) or ["full_attention"] * len(self.windows)
        self.logit_cap = getattr(config, "final_logit_softcapping", None)

    @property
    def has_sliding_window(self) -> bool:
        """Whether some layer attends within a window of cache columns (so a cache's column layout matters)."""
        return any(window is not None for window in self.windows)

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
            ``[B, V]`` logits of the last position (the next-token distribution, soft-capped where the model caps).
        """
        end = start + tokens.shape[1]
        cache.key_mask[:, start:end] = token_mask
        columns = torch.arange(end, device=tokens.device)  # [end]
        query_columns = torch.arange(start, end, device=tokens.device)  # [S]
        distance = query_columns[:, None] - columns[None, :]  # [S, end]
        # A padding query may attend to itself only, so that no row is fully masked (which would give NaN).
        itself = (distance == 0)[None]  # [1, S, end]
        masks: dict[int | None, Tensor] = {}  # [B, 1, S, end] by window
        for window in set(self.windows):
            reach = (distance >= 0) & (distance < window if window is not None else True)  # [S, end]
            masks[window] = ((reach[None] & cache.key_mask[:, None, :end]) | itself)[:, None]

        hidden = self.backbone.embed_tokens(tokens)  # [B, S, H]
        rotary = {kind: self._rotary(hidden, positions, kind) for kind in set(self.layer_types)}
        for index, layer in enumerate(self.backbone.layers):
            cos, sin = rotary[self.layer_types[index]]
            attended = self._attention(layer.self_attn, layer.input_layernorm(hidden), cos, sin, cache, index, start,
                                       masks[self.windows[index]])  # fmt: skip
            if self.layout.sandwich_norms:
                hidden = hidden + layer.post_attention_layernorm(attended)
                hidden = hidden + layer.post_feedforward_layernorm(layer.mlp(layer.pre_feedforward_layernorm(hidden)))
            else:
                hidden = hidden + attended
                hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        last = self.backbone.norm(hidden[:, -1])  # [B, H]
        return soft_cap(self.lm_head(last), self.logit_cap)  # [B, V]

    def _rotary(self, hidden: Tensor, positions: Tensor, layer_type: str) -> tuple[Tensor, Tensor]:
        """``(cos, sin)`` ``[B, 1, S, D]`` of ``positions`` ``[B, S]`` for layers of ``layer_type``."""
        if self.layout.rope_per_layer_type:
            cos, sin = self.backbone.rotary_emb(hidden, positions, layer_type)  # [B, S, D] each
        else:
            cos, sin = self.backbone.rotary_emb(hidden, positions)
        return cos[:, None], sin[:, None]

    def _attention(
        self, attention: nn.Module, normed: Tensor, cos: Tensor, sin: Tensor, cache: StaticKVCache, index: int,
        start: int, attend: Tensor,
    ) -> Tensor:  # fmt: skip
        """One layer's attention output ``[B, S, H]`` for its normed input ``[B, S, H]``; writes the layer's keys and
        values into cache columns ``[start, start + S)``; ``attend`` ``[B, 1, S, start + S]`` bool."""
        batch, length, _ = normed.shape
        end = start + length
        q = attention.q_proj(normed).view(batch, length, self.num_heads, self.head_dim)  # [B, S, heads, D]
        k = attention.k_proj(normed).view(batch, length, self.num_kv_heads, self.head_dim)  # [B, S, kv_heads, D]
        v = attention.v_proj(normed).view(batch, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if self.layout.qk_norm:
            q, k = attention.q_norm(q), attention.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # [B, heads, S, D], [B, kv_heads, S, D]
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
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
        return attention.o_proj(out.transpose(1, 2).reshape(batch, length, -1))
