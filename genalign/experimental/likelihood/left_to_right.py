"""JustGRPO's left-to-right likelihood for masked diffusion LMs [35], registered as ``"left_to_right"``."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.policies.dlm.likelihood.masked_diffusion import LIKELIHOOD_PROXIES, Level, ModelFn, ProxyOutput
from genalign.policies.dlm.likelihood.trace import trace


@LIKELIHOOD_PROXIES.register(
    "left_to_right",
    source="JustGRPO [35] (The Flexibility Trap)",
    formula="log p(x_j | prompt, x_<b(j), positions >= b(j) masked), b(j) = start of j's block",
    summary="Autoregressive-by-block likelihood for training; parallel block decoding kept at inference.",
)
def left_to_right(
    model_fn: ModelFn,
    prompt_ids: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    mask_id: int,
    seeds: Tensor,
    prompt_attention_mask: Tensor | None = None,
    decode_step: Tensor | None = None,
    block_size: int = 1,
    level: Level = "token",
) -> ProxyOutput:
    """Autoregressive-order likelihood of a masked diffusion LM (JustGRPO [35]): train as if the model decoded left
    to right, keep parallel (block) decoding for inference.

    With ``block_size = 1`` token ``j`` is scored with the prompt and ``x_<j`` visible and every answer position
    ``>= j`` masked, ``logp[i, j] = log p_θ(x_j | prompt, x_<j, [MASK]·(T−j))``: the exact chain-rule
    log-likelihood of the answer under the left-to-right order, so standard token-level GRPO applies. ``T`` forward
    passes (noisy copies) per sample. ``block_size = b`` groups ``b`` consecutive positions per forward (positions
    of a block scored together with the block masked, earlier blocks visible): ``ceil(T / b)`` passes, exact only
    for ``b = 1``.

    Reading chosen: the abstract says JustGRPO "forgoes arbitrary order" and applies standard GRPO; scoring each
    token in left-to-right order with later positions masked is our reading of the tractable likelihood
    **(inferred)**. It is the :func:`~genalign.policies.dlm.likelihood.trace.trace` replay of the decoding order
    ``decode_step[j] = j`` (one code path). Deterministic (``seeds`` and the rollout's ``decode_step`` unused).
    ``logp``: ``[N, T]`` (``level="token"``) or ``[N, 1]``.
    """
    del decode_step
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size={block_size!r} must be a positive integer (1 = exact left-to-right order).")
    n, length = completion_ids.shape
    order = torch.arange(length, device=completion_ids.device).expand(n, length)  # [N, T] position j decoded at step j
    return trace(
        model_fn,
        prompt_ids,
        completion_ids,
        completion_mask,
        mask_id=mask_id,
        seeds=seeds,
        prompt_attention_mask=prompt_attention_mask,
        decode_step=order,
        steps_per_forward=block_size,
        level=level,
    )
