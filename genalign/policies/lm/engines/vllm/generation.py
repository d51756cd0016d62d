"""genalign's :class:`~genalign.policies.lm.engines.base.SamplingParams` -> a ``/generate`` request, and its reply -> a
:class:`~genalign.policies.lm.engines.base.Generation`.

The request asks vLLM for exactly genalign's sampling rule:

* ``stop_token_ids`` = the policy's end tokens with ``ignore_eos=True``, so genalign's end-token set is the only one
  (vLLM would otherwise also stop at the tokenizer's own EOS: vllm/sampling_params.py, ``update_from_generation_config``);
* ``stop`` strings with ``skip_special_tokens=False`` (the text genalign's stop matcher decodes) and ``detokenize`` only
  when there are stop strings (vLLM matches them on text; token ids alone otherwise);
* ``logprobs=0``: the sampled token's log-prob, which the server's ``logprobs_mode="processed_logprobs"`` takes after
  temperature, i.e. ``log softmax(logits / T)`` (top-k / top-p are refused, :meth:`VLLMOptions.check_policy`);
* one seed per row drawn from the policy's generator, so a rollout is reproducible from the generator state and each
  row's sample does not depend on which other rows share the batch.

vLLM returns every sampled token including the end token or the token that completes a stop string;
:func:`finalize_completions` then applies the same end/stop rule as every other engine, and each row is clipped to what
vLLM returned (a row that vLLM stopped on a stop string the decoded text does not show counts as truncated).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from genalign.policies.lm.engines.base import Generation, SamplingParams, StopStringMatcher, finalize_completions

SEED_HIGH = 2**31 - 1


def sampling_fields(params: SamplingParams) -> dict[str, Any]:
    """vLLM ``SamplingParams`` keyword arguments (vllm/sampling_params.py, vLLM 0.33.0) for ``params``."""
    if params.top_k > 0 or params.top_p < 1.0:
        raise ValueError(
            f"top_k={params.top_k} / top_p={params.top_p}: vLLM's processed log-probs would be renormalised over the "
            "kept tokens, not genalign's log softmax(logits / T); use top_k=0 and top_p=1.0 with engine='vllm'."
        )
    return {
        "n": 1,
        "temperature": params.temperature,
        "top_p": 1.0,
        "top_k": 0,
        "max_tokens": params.max_new_tokens,
        "stop_token_ids": list(params.eos_token_ids),
        "ignore_eos": True,
        "stop": list(params.stop) or None,
        "detokenize": bool(params.stop),
        "skip_special_tokens": False,
        "logprobs": 0,
    }


def build_generate_request(
    prompt_ids: Tensor, prompt_mask: Tensor, params: SamplingParams, generator: torch.Generator
) -> dict[str, Any]:
    """The ``/generate`` body (without ``adapter``) for left-padded ``prompt_ids`` ``[B, P]`` / ``prompt_mask`` ``[B, P]``.

    One seed per row is drawn from ``generator`` (``B`` draws, whatever the rank or backend).
    """
    seeds = torch.randint(0, SEED_HIGH, (prompt_ids.shape[0],), generator=generator, device=generator.device)
    prompts = [ids[mask.bool()].tolist() for ids, mask in zip(prompt_ids.cpu(), prompt_mask.cpu(), strict=True)]
    return {"prompts": prompts, "sampling": sampling_fields(params), "seeds": seeds.tolist()}


def parse_generate_response(
    response: dict[str, Any],
    params: SamplingParams,
    matcher: StopStringMatcher | None,
    *,
    batch: int,
    device: torch.device,
) -> Generation:
    """Turn a ``/generate`` reply for ``batch`` prompts into a :class:`Generation` on ``device``."""
    outputs = response.get("outputs")
    if not isinstance(outputs, list) or len(outputs) != batch:
        count = len(outputs) if isinstance(outputs, list) else outputs
        raise RuntimeError(f"the vLLM server returned {count} outputs for {batch} prompts.")
    lengths = []
    for row, out in enumerate(outputs):
        tokens, logprobs = out.get("token_ids", []), out.get("logprobs", [])
        if not tokens or len(tokens) != len(logprobs):
            raise RuntimeError(
                f"the vLLM server returned {len(tokens)} tokens and {len(logprobs)} log-probs for prompt {row}; "
                "every completion needs >= 1 token and one log-prob per token."
            )
        if not all(math.isfinite(v) for v in logprobs):
            raise RuntimeError(f"the vLLM server returned a non-finite log-prob for prompt {row}: {logprobs}.")
        lengths.append(len(tokens))
    width = max(lengths, default=1)
    raw_ids = torch.full((batch, width), params.pad_token_id, dtype=torch.long)
    raw_logp = torch.zeros(batch, width, dtype=torch.float32)
    for row, out in enumerate(outputs):
        raw_ids[row, : lengths[row]] = torch.tensor(out["token_ids"], dtype=torch.long)
        raw_logp[row, : lengths[row]] = torch.tensor(out["logprobs"], dtype=torch.float32)
    generation = finalize_completions(raw_ids, raw_logp, params, matcher)
    clipped = _clip_to_lengths(generation, torch.tensor(lengths), params.pad_token_id)
    return Generation(
        *(t.to(device) for t in (clipped.completion_ids, clipped.completion_mask, clipped.logp, clipped.truncated))
    )


def _clip_to_lengths(generation: Generation, lengths: Tensor, pad_token_id: int) -> Generation:
    """Cut row ``i`` after ``lengths[i]`` tokens; a row that ran into padding (no end found within its own tokens) is
    truncated. Padding may equal an end token, which must not end a row that vLLM stopped without one."""
    mask = generation.completion_mask.bool()  # [B, C]
    positions = torch.arange(mask.shape[1])  # [C]
    within = positions[None, :] < lengths[:, None]  # [B, C]
    overran = (mask & ~within).any(dim=1)  # [B]
    mask = mask & within
    keep = int(mask.sum(dim=1).max()) if mask.numel() else 0
    return Generation(
        completion_ids=torch.where(mask, generation.completion_ids, pad_token_id)[:, :keep].contiguous(),
        completion_mask=mask.float()[:, :keep].contiguous(),
        logp=torch.where(mask, generation.logp, 0.0)[:, :keep].contiguous(),
        truncated=generation.truncated | overran,
    )
