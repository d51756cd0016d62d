"""Token log-probs of completions at the sampling temperature, without materialising ``[B, T, V]`` float32 logits.

The backbone runs once over ``[prompt | completion]``; the head, the softmax and the gather then run over the hidden
states of the *real* completion tokens only (padding is skipped), ``chunk_size`` tokens at a time. When gradients are
needed and there is more than one chunk, each chunk is checkpointed: its logits are recomputed during backward, so at any
moment at most one chunk's ``[chunk_size, V]`` logits (and their gradient) exist. Each token's value depends only on its
own hidden state, so the result does not depend on how the batch or the chunks are split.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Positions ``[B, L]`` that skip left padding: ``cumsum(mask) - 1`` clamped at 0 (what ``generate`` uses)."""
    return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)


def _chunk_logprobs(
    hidden: Tensor, targets: Tensor, head: nn.Module, temperature: float, with_entropy: bool
) -> tuple[Tensor, Tensor]:
    """``hidden`` ``[n, H]``, ``targets`` ``[n]`` -> log-probs ``[n]`` and entropies ``[n]`` (zeros when not asked)."""
    scaled = head(hidden).float() / temperature  # [n, V]
    log_norm = torch.logsumexp(scaled, dim=-1)  # [n]
    logp = scaled.gather(1, targets[:, None]).squeeze(1) - log_norm  # [n]
    if not with_entropy:
        return logp, torch.zeros_like(logp)
    probs = torch.exp(scaled - log_norm[:, None])  # [n, V]
    entropy = log_norm - (probs * scaled).sum(dim=-1)  # [n]
    return logp, entropy


def token_logprobs_from_hidden(
    hidden: Tensor,
    targets: Tensor,
    mask: Tensor,
    head: nn.Module,
    *,
    temperature: float,
    chunk_size: int,
    with_entropy: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs of ``targets`` given the hidden states that predict them.

    Args:
        hidden: ``[B, C, H]`` hidden state at the position before each target token.
        targets: ``[B, C]`` long target token ids.
        mask: ``[B, C]`` 1 for real targets; others get log-prob 0 (and entropy 0) and cost nothing.
        head: the output projection ``H -> V``.
        temperature: logits are divided by it before the softmax.
        chunk_size: how many tokens go through the head at once.
        with_entropy: also return the per-token entropy of ``softmax(logits / T)``.

    Returns:
        ``logp`` ``[B, C]`` float32 and ``entropy`` ``[B, C]`` float32 or ``None``.
    """
    flat_index = torch.nonzero(mask.reshape(-1) > 0).flatten()  # [n] real tokens
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])[flat_index]  # [n, H]
    flat_targets = targets.reshape(-1)[flat_index]  # [n]
    use_checkpoint = torch.is_grad_enabled() and flat_index.numel() > chunk_size
    logps, entropies = [], []
    for start in range(0, flat_index.numel(), chunk_size):
        args = (
            flat_hidden[start : start + chunk_size],
            flat_targets[start : start + chunk_size],
            head,
            temperature,
            with_entropy,
        )
        if use_checkpoint:
            logp, entropy = checkpoint(_chunk_logprobs, *args, use_reentrant=False)
        else:
            logp, entropy = _chunk_logprobs(*args)
        logps.append(logp)
        entropies.append(entropy)
    values = torch.cat(logps) if logps else hidden.new_zeros(0, dtype=torch.float32)  # [n]
    logp_out = torch.zeros(mask.numel(), dtype=torch.float32, device=hidden.device).index_put((flat_index,), values)
    logp_out = logp_out.view(mask.shape)  # [B, C]
    if not with_entropy:
        return logp_out, None
    entropy_values = torch.cat(entropies) if entropies else values
    entropy_out = torch.zeros(mask.numel(), dtype=torch.float32, device=hidden.device).index_put(
        (flat_index,), entropy_values
    )
    return logp_out, entropy_out.view(mask.shape)


def completion_logprobs(
    causal_lm: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    temperature: float,
    chunk_size: int,
    with_entropy: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Score completions under ``causal_lm`` (a ``*ForCausalLM``; LoRA layers injected by peft apply).

    Args:
        prompt_ids: ``[B, P]`` left-padded prompt ids, ``prompt_mask`` ``[B, P]``.
        completion_ids: ``[B, C]`` right-padded completion ids, ``completion_mask`` ``[B, C]``.

    Returns:
        ``logp`` ``[B, C]`` and ``entropy`` ``[B, C]`` (or ``None``), see :func:`token_logprobs_from_hidden`.
    """
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [B, P + C]
    attention_mask = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)  # [B, P + C]
    outputs = causal_lm.base_model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
    )
    width = prompt_ids.shape[1]
    hidden = outputs.last_hidden_state[:, width - 1 : width - 1 + completion_ids.shape[1]]  # [B, C, H]
    return token_logprobs_from_hidden(
        hidden,
        completion_ids,
        completion_mask,
        causal_lm.get_output_embeddings(),
        temperature=temperature,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
    )


def naive_completion_logprobs(
    causal_lm: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    temperature: float,
) -> Tensor:
    """Reference implementation through the full ``[B, P + C, V]`` logits (for tests and the memory benchmark)."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)
    logits = causal_lm(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
    ).logits  # [B, P + C, V]
    width = prompt_ids.shape[1]
    logp_all = (logits[:, width - 1 : -1].float() / temperature).log_softmax(dim=-1)  # [B, C, V]
    logp = logp_all.gather(2, completion_ids[:, :, None]).squeeze(2)  # [B, C]
    return logp * completion_mask
