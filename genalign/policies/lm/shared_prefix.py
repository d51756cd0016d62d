"""Shared-prefix scoring: the prompt a group shares is encoded once per (micro-)batch, its K/V reused by every member.

A GRPO group is ``G`` completions of one prompt, so the plain scoring pass (:func:`genalign.policies.lm.logprobs.
completion_scores`) runs the same ``P`` prompt tokens through the backbone ``G`` times. Prefix Grouper [58] splits the
attention into the prefix part, computed once, and the suffixes reading it; the shared-prefix schedule of [50] runs
the prefix forward once, the suffixes against its K/V, and the prefix backward once on the accumulated K/V gradients.

Here (a :data:`~genalign.policies.lm.logprobs.HiddenStatesFn` that ``CausalLMPolicy.score`` passes to
:func:`~genalign.policies.lm.logprobs.completion_scores` with ``policy.shared_prefix_scoring``), within one call:

1. the distinct prompts ``[U, P]`` of the batch (rows with the same ids and mask) run through the backbone once, with
   the KV cache on and gradients kept;
2. the cache is gathered to the ``B`` rows (``index_select`` along the batch: its backward sums the members' K/V
   gradients into the shared prefix, so the prefix backward also runs once, on the accumulated ``gK``/``gV``);
3. the completions ``[B, C - 1]`` run as the suffix, attending to the gathered prefix K/V through the usual
   ``[prompt | completion]`` attention mask and positions.

The hidden state predicting the first completion token is the prompt's last one (from step 1), the others come from
step 3, so the result equals the plain pass's up to float rounding (attention over a split key range), with the same
gradients; prompt rows need not be adjacent, and micro-batches that hold a whole group save the most. The saving is
``(G - 1) / G`` of the prompt's backbone work, forward and backward; the head pass is unchanged.

Reading chosen: [50]'s schedule reuses the prefix across the micro-batches of a group (prefix activations held or
offloaded while the suffix micro-batches accumulate ``gK``/``gV``); here the reuse is within the scoring call, so a
group split over micro-batches encodes its prompt once per micro-batch. Gradient checkpointing recomputes layers
without their cache, so the two are not combined (config load says so).
"""

from __future__ import annotations

import inspect

import torch
from torch import Tensor, nn

from genalign.policies.lm.logprobs import backbone_output, position_ids_from_mask
from genalign.policies.lm.reference import get_base_model


def cache_keyword(module: nn.Module) -> str:
    """The name transformers gives the KV cache, as a forward argument and an output field: ``cache`` (5.x), or
    ``past_key_values`` (4.x, deprecated in 5.x)."""
    parameters = inspect.signature(get_base_model(module).forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def distinct_prompts(prompt_ids: Tensor, prompt_mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The distinct rows of a left-padded prompt batch.

    Args:
        prompt_ids: ``[B, P]`` prompt ids; ``prompt_mask`` ``[B, P]``.

    Returns:
        ``unique_ids`` ``[U, P]``, ``unique_mask`` ``[U, P]`` and ``inverse`` ``[B]`` (row ``b`` is prompt
        ``inverse[b]``). Two rows are the same prompt when their ids and their masks are equal.
    """
    width = prompt_ids.shape[1]
    keys = torch.cat([prompt_ids.long(), prompt_mask.long()], dim=1)  # [B, 2P]
    unique, inverse = torch.unique(keys, dim=0, return_inverse=True)  # [U, 2P], [B]
    return unique[:, :width], unique[:, width:].to(prompt_mask.dtype), inverse


def shared_prefix_hidden_states(
    module: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_attention: Tensor,
) -> Tensor:
    """``[B, C, H]`` the hidden states predicting each completion token, with every distinct prompt encoded once.

    Args:
        module: a ``*ForCausalLM`` (or its peft wrapper); called itself, so hooks of sharded training run.
        prompt_ids: ``[B, P]`` left-padded prompt ids (the last column is every prompt's last token);
            ``prompt_mask`` ``[B, P]``.
        completion_ids: ``[B, C]`` right-padded completion ids.
        completion_attention: ``[B, C]`` 1 for the completion tokens attended to.

    Returns:
        The same tensor as :func:`genalign.policies.lm.logprobs.full_pass_hidden_states` (one pass over the whole
        ``[prompt | completion]``), up to float rounding; a :data:`~genalign.policies.lm.logprobs.HiddenStatesFn`.
    """
    if prompt_mask.numel() and not bool(prompt_mask[:, -1].all()):
        raise ValueError("shared-prefix scoring needs left-padded prompts (a real last token in every row).")
    unique_ids, unique_mask, inverse = distinct_prompts(prompt_ids, prompt_mask)
    prefix = backbone_output(
        module,
        input_ids=unique_ids,
        attention_mask=unique_mask,
        position_ids=position_ids_from_mask(unique_mask),
        use_cache=True,
    )
    last_prompt_hidden = prefix.last_hidden_state[inverse, -1:]  # [B, 1, H]
    width = completion_ids.shape[1]
    if width <= 1:
        return last_prompt_hidden[:, :width]
    keyword = cache_keyword(module)
    cache = getattr(prefix, keyword)
    if cache is None:
        raise RuntimeError(
            "the prompt pass returned no KV cache (gradient checkpointing drops it); "
            "set policy.shared_prefix_scoring=false or policy.gradient_checkpointing=false."
        )
    cache.batch_select_indices(inverse)  # every layer's K/V [U, ...] -> [B, ...]; backward sums the members
    attention_mask = torch.cat([prompt_mask.long(), completion_attention.long()], dim=1)  # [B, P + C]
    columns = prompt_ids.shape[1] + width - 1  # the last completion token predicts nothing
    suffix = backbone_output(
        module,
        input_ids=completion_ids[:, : width - 1],
        attention_mask=attention_mask[:, :columns],
        position_ids=position_ids_from_mask(attention_mask)[:, prompt_ids.shape[1] : columns],
        use_cache=True,
        **{keyword: cache},
    )
    return torch.cat([last_prompt_hidden, suffix.last_hidden_state], dim=1)  # [B, C, H]
