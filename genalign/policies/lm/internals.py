"""Rollout-time readings of the model's internals for token credit: attention maps and gradient saliency of the
completions, measured by the weights that sampled them (eval mode; :func:`genalign.policies.lm.probes.probe_structure`
calls these for the fields a configured method requests).

* ``attention_entropy`` ``[N, T]`` ([272]): the entropy of the attention distribution of the position that predicts
  each action (over the keys it may attend), averaged over heads and layers: low for tokens with concentrated
  contextual support ("anchors"), high for diffuse ones ("explorers").
* ``answer_attention_flow`` ``[N, T]`` ([299]): how much of the answer region's information flows through each
  action, by attention rollout: per layer the head-averaged attention plus the residual path,
  ``Ã_l = ½(Ā_l + I)`` (rows sum to 1: mass is conserved along every path, whatever its length), multiplied through
  the layers, ``R = Ã_n ⋯ Ã_1``; an action's flow is its column of ``R`` averaged over the answer positions.
* ``answer_saliency`` ``[N, T]`` ([269]): gradient × activation saliency of each action's input embedding toward the
  answer, ``|Σ_h e_th · ∂ log π(answer) / ∂e_th|`` with ``log π(answer)`` the summed log-probability of the answer
  tokens (one backward pass through the inputs only; no parameter gradient is kept).

The *answer region* is the completion's last ``probes.answer_tokens`` real tokens that decode to text (trailing
special tokens such as EOS are skipped). Attention maps need the eager attention kernel: the probe switches the model
to it for its pass and back afterwards (its memory grows with the square of the sequence length: batch it with
``probes.batch_size``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from genalign.policies.lm.logprobs import backbone_output, position_ids_from_mask
from genalign.policies.lm.reference import get_base_model

#: the rollout fields this module measures
INTERNAL_FIELDS = ("attention_entropy", "answer_attention_flow", "answer_saliency")


@contextmanager
def eager_attention(model: Any) -> Iterator[None]:
    """``model`` with the eager attention kernel (which returns attention maps), its own kernel restored after."""
    base = get_base_model(model)
    previous = base.config._attn_implementation
    if previous != "eager":
        base.set_attn_implementation("eager")
    try:
        yield
    finally:
        if previous != "eager":
            base.set_attn_implementation(previous)


def answer_positions(tokenizer, completion_ids: Tensor, mask: Tensor, answer_tokens: int) -> Tensor:
    """``[N, T]`` bool: the answer region of each completion (module docstring)."""
    region = torch.zeros(mask.shape, dtype=torch.bool)
    for i, (ids, valid) in enumerate(zip(completion_ids.cpu().tolist(), (mask.cpu() > 0).tolist(), strict=True)):
        texted = [t for t, (token, v) in enumerate(zip(ids, valid, strict=True))
                  if v and tokenizer.decode([token], skip_special_tokens=True)]  # fmt: skip
        region[i, texted[-answer_tokens:]] = True
    return region


def _sequence(rollout: Any, device: torch.device) -> tuple[Tensor, Tensor, int]:
    """``(ids, attention_mask, P)``: ``[prompt | completion]`` ``[N, P + T]`` and the prompt width."""
    data = rollout.per_sample
    ids = torch.cat([data["prompt_ids"], data["completion_ids"]], 1).to(device)
    attention = torch.cat([data["prompt_mask"], rollout.action_mask.long()], 1).to(device)
    return ids, attention, data["prompt_ids"].shape[1]


def attention_maps(model: Any, ids: Tensor, attention: Tensor) -> tuple[Tensor, ...]:
    """One ``[B, heads, L, L]`` attention map per layer of ``ids`` ``[B, L]`` (eager kernel, no gradient)."""
    with torch.no_grad(), eager_attention(model):
        output = backbone_output(model, input_ids=ids, attention_mask=attention,
                                 position_ids=position_ids_from_mask(attention), output_attentions=True)  # fmt: skip
    return tuple(layer.float() for layer in output.attentions)


def mean_attention_entropy(maps: tuple[Tensor, ...], valid_keys: Tensor) -> Tensor:
    """``[B, L]`` the entropy of each query position's attention over ``valid_keys`` ``[B, L]``, averaged over heads
    and layers."""
    total = 0.0
    for layer in maps:  # [B, heads, L, L]
        p = torch.where(valid_keys[:, None, None, :] > 0, layer, 0.0)
        total = total - torch.special.xlogy(p, p).sum(-1).mean(1)  # [B, L]
    return total / len(maps)


def attention_rollout(maps: tuple[Tensor, ...]) -> Tensor:
    """``[B, L, L]`` ``R = Ã_n ⋯ Ã_1`` with ``Ã_l = ½(mean_heads A_l + I)`` (``R[b, i, j]``: the share of position
    ``i``'s top representation that flows from input ``j``)."""
    size = maps[0].shape[-1]
    identity = torch.eye(size, dtype=maps[0].dtype, device=maps[0].device)
    rollout = identity.expand(maps[0].shape[0], size, size)
    for layer in maps:
        mixed = 0.5 * layer.mean(1) + 0.5 * identity  # [B, L, L]
        rollout = mixed @ rollout
    return rollout


def _actions(values: Tensor, prompt_width: int, mask: Tensor, shift: int) -> Tensor:
    """``[N, T]`` the values ``[N, L]`` at the completion positions (``shift = −1``: the position predicting each
    action), 0 on padding."""
    width = mask.shape[1]
    picked = values[:, prompt_width + shift : prompt_width + shift + width].cpu()
    return torch.where(mask.cpu() > 0, picked, 0.0)


def internal_structure(policy: Any, rollout: Any, wanted: set[str]) -> dict[str, Tensor]:
    """The fields of :data:`INTERNAL_FIELDS` in ``wanted``, for ``rollout``, batched by ``probes.batch_size``."""
    options = policy.config.probes
    mask = rollout.action_mask
    region = answer_positions(policy.tokenizer, rollout.per_sample["completion_ids"], mask, options.answer_tokens)
    ids, attention, prompt_width = _sequence(rollout, policy.device)
    values: dict[str, list[Tensor]] = {name: [] for name in INTERNAL_FIELDS if name in wanted}
    for start in range(0, len(rollout), options.batch_size):
        rows = slice(start, start + options.batch_size)
        part_mask, part_region = mask[rows], region[rows]
        if "attention_entropy" in values or "answer_attention_flow" in values:
            maps = attention_maps(policy.model, ids[rows], attention[rows])
            if "attention_entropy" in values:
                entropy = mean_attention_entropy(maps, attention[rows])  # [B, L]
                values["attention_entropy"].append(_actions(entropy, prompt_width, part_mask, -1))
            if "answer_attention_flow" in values:
                flow = attention_rollout(maps)  # [B, L, L]
                answer = torch.zeros(attention[rows].shape, dtype=flow.dtype, device=flow.device)
                answer[:, prompt_width:] = part_region.to(flow)
                share = (answer[:, :, None] * flow).sum(1) / answer.sum(1, keepdim=True).clamp_min(1)  # [B, L]
                values["answer_attention_flow"].append(_actions(share, prompt_width, part_mask, 0))
        if "answer_saliency" in values:
            saliency = answer_saliency(policy.model, ids[rows], attention[rows], prompt_width, part_region)
            values["answer_saliency"].append(_actions(saliency, prompt_width, part_mask, 0))
    return {name: torch.cat(parts).float() for name, parts in values.items()}


def answer_saliency(model: Any, ids: Tensor, attention: Tensor, prompt_width: int, region: Tensor) -> Tensor:
    """``[B, L]`` gradient × activation saliency of every input embedding toward the answer log-probability
    (module docstring); ``region`` ``[B, T]`` marks the answer tokens among the completion's."""
    embeddings = get_base_model(model).get_input_embeddings()(ids).detach().requires_grad_(True)  # [B, L, H]
    with torch.enable_grad():
        output = backbone_output(model, inputs_embeds=embeddings, attention_mask=attention,
                                 position_ids=position_ids_from_mask(attention))  # fmt: skip
        hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]  # [B, L, H]
        rows, columns = region.nonzero(as_tuple=True)  # the answer tokens
        predicting = hidden[rows.to(hidden.device), (prompt_width + columns - 1).to(hidden.device)]  # [n, H]
        logits = get_base_model(model).get_output_embeddings()(predicting).float()  # [n, V]
        targets = ids[rows.to(ids.device), (prompt_width + columns).to(ids.device)]  # [n]
        answer_logp = torch.log_softmax(logits, -1).gather(1, targets[:, None]).sum()
        (gradient,) = torch.autograd.grad(answer_logp, embeddings)  # parameters get no gradient
    return (gradient * embeddings.detach()).sum(-1).abs().float()  # [B, L]


__all__ = [
    "INTERNAL_FIELDS",
    "answer_positions",
    "answer_saliency",
    "attention_maps",
    "attention_rollout",
    "eager_attention",
    "internal_structure",
    "mean_attention_entropy",
]
