"""TraceRL's decoding-trace replay for masked diffusion LMs, registered as ``"trace"``."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.policies.dlm.likelihood.masked_diffusion import (
    LIKELIHOOD_PROXIES,
    Level,
    ModelFn,
    ProxyOutput,
    masked_token_logp,
    reduce_level,
)


@LIKELIHOOD_PROXIES.register(
    "trace",
    source="TraceRL",
    formula="log p(x_j | state before the step that decoded j)",
    summary="The decoding trajectory's own step log-probs (the state each token was committed from).",
)
def trace(
    model_fn: ModelFn,
    prompt_ids: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    mask_id: int,
    seeds: Tensor,
    prompt_attention_mask: Tensor | None = None,
    decode_step: Tensor | None = None,
    steps_per_forward: int = 1,
    level: Level = "token",
) -> ProxyOutput:
    """TraceRL decoding-trace replay: each token is scored in the state in which the sampler decoded it.

    Decoding steps are grouped ``steps_per_forward`` at a time (TraceRL's "shrink"); for group ``g`` the input keeps
    the tokens decoded before the group and masks the others, and the targets are the tokens decoded in the group.
    With ``steps_per_forward=1`` this is the exact log-probability of the sampled tokens given the sampled order.
    Deterministic (``seeds`` unused). ``decode_step``: ``[N, T]`` from the rollout. ``logp``: ``[N, T]`` or
    ``[N, 1]``. Forward passes: number of groups of the longest trace.
    """
    del seeds
    if decode_step is None:
        raise ValueError("the 'trace' likelihood proxy needs decode_step [N, T] recorded at generation; pass it.")
    if steps_per_forward < 1:
        raise ValueError(f"steps_per_forward={steps_per_forward} must be >= 1 (decoding steps replayed per forward).")
    group = decode_step.clamp_min(0) // steps_per_forward  # [N, T]
    num_groups = int(group.max().item()) + 1
    n = completion_ids.shape[0]
    groups = torch.arange(num_groups, device=group.device).view(1, num_groups, 1)  # [1, G, 1]
    completion_noise = (group.unsqueeze(1) >= groups).cpu()  # [N, G, T] masked: decoded in or after group g
    prompt_noise = torch.zeros(n, num_groups, prompt_ids.shape[1], dtype=torch.bool)
    logp = masked_token_logp(
        model_fn,
        prompt_ids,
        completion_ids,
        prompt_noise,
        completion_noise,
        mask_id=mask_id,
        prompt_attention_mask=prompt_attention_mask,
    )  # [N, G, T]
    target = group.unsqueeze(1) == groups  # [N, G, T]
    terms = (logp * target).sum(dim=1)  # [N, T]
    out, mask = reduce_level(terms, completion_mask, level)
    return ProxyOutput(logp=out, mask=mask, num_forward=num_groups)
