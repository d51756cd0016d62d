"""Block unmasking with a trainable decoding policy deciding the commits (Co-GRPO [179], SAS [118]).

The loop is the sampler of :func:`genalign.schedulers.masked_diffusion.generate` (blocks left to right, ``S_b``
steps per block, Gumbel-max draws at a temperature, the mask token never drawn) with one difference: which of the
drawn tokens are committed is decided by a :class:`~genalign.policies.dlm.base.DecodingPolicy` instead of a fixed
count and remasking rule. Every step commits at least one token and a block is finished by its last step, so every
sample takes exactly ``S`` forward passes.

Besides the answer it records, per step ``s``:

* the decoding policy's records (``[B, S, ...]``), from which the policy re-scores its decisions;
* ``path_logp[b, s] = Σ_{j committed at s} log p_θ(x_j | x_s)``: the log-probability of the committed tokens under
  the denoiser at temperature 1 (mask excluded) in the state they were decoded from. Its sum over the steps is the
  pathwise log-likelihood of the answer along the decoded order (SAS [118]'s self-aware reward; it equals the
  ``trace`` likelihood proxy's sum over the answer).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from genalign.policies.dlm.base import DecodingPolicy, StepView
from genalign.schedulers.masked_diffusion import ModelFn, check_generation_args, gumbel_max_sample, tokens_per_step


@dataclass
class LearnedGeneration:
    """Output of :func:`generate_with_decoding_policy`.

    Attributes:
        completion_ids: ``[B, T]`` answer tokens (no mask left).
        decode_step: ``[B, T]`` long, the global step that committed each token.
        path_logp: ``[B, S]`` float32 log-probability of the tokens committed at each step (module docstring).
        records: ``{key: [B, S, ...]}`` the decoding policy's records of every step.
        num_forward: denoiser forward passes per sequence (``S``).
    """

    completion_ids: Tensor
    decode_step: Tensor
    path_logp: Tensor
    records: dict[str, Tensor]
    num_forward: int


def block_view(
    logits: Tensor, drawn: Tensor, candidates: Tensor, *, step_in_block: int, steps_per_block: int
) -> StepView:
    """The :class:`StepView` of a block: ``logits`` ``[B, Bk, V]`` with the mask token at ``-inf``, ``drawn`` and
    ``candidates`` ``[B, Bk]``."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)  # [B, Bk, V]
    token_logp = log_probs.gather(-1, drawn.unsqueeze(-1)).squeeze(-1)  # [B, Bk]
    scheduled = tokens_per_step(candidates.shape[1], steps_per_block)[step_in_block]
    return StepView(
        token_logp=token_logp,
        logits=logits.float(),
        candidates=candidates,
        step_in_block=step_in_block,
        steps_per_block=steps_per_block,
        scheduled=scheduled,
    )


@torch.no_grad()
def generate_with_decoding_policy(
    model_fn: ModelFn,
    prompt_ids: Tensor,
    decoding: DecodingPolicy,
    *,
    prompt_attention_mask: Tensor | None,
    mask_id: int,
    gen_length: int,
    block_length: int,
    steps: int,
    temperature: float,
    greedy_decisions: bool,
    generator: torch.Generator | None,
) -> LearnedGeneration:
    """Sample answers for left-padded prompts, the commits chosen by ``decoding``.

    Args:
        model_fn: ``(input_ids [B, L], attention_mask [B, L] | None) -> logits [B, L, V]``, aligned logits.
        prompt_ids: ``[B, P]``; prompt_attention_mask: ``[B, P]`` or None.
        decoding: the decoding policy (its ``choose`` runs once per step).
        temperature: Gumbel-max temperature of the token draws (0 = greedy tokens).
        greedy_decisions: the decoding policy takes its most likely decision (evaluation) instead of sampling one.
        generator: random stream of the token draws and of the decoding policy's draws.
    """
    check_generation_args(gen_length=gen_length, block_length=block_length, steps=steps, mask_id=mask_id)
    batch, prompt_length = prompt_ids.shape
    device = prompt_ids.device
    steps_per_block = steps // (gen_length // block_length)
    sample = torch.cat([prompt_ids, torch.full((batch, gen_length), mask_id, dtype=prompt_ids.dtype, device=device)], 1)
    attention_mask = None
    if prompt_attention_mask is not None:
        ones = torch.ones((batch, gen_length), dtype=prompt_attention_mask.dtype, device=device)
        attention_mask = torch.cat([prompt_attention_mask, ones], dim=1)  # [B, P + T]
    decode_step = torch.full((batch, gen_length), -1, dtype=torch.long, device=device)
    path_logp = torch.zeros(batch, steps, dtype=torch.float32, device=device)
    records: list[dict[str, Tensor]] = []
    never = torch.tensor([mask_id], device=device)
    for step in range(steps):
        start = prompt_length + (step // steps_per_block) * block_length
        logits = model_fn(sample, attention_mask)[:, start : start + block_length].float()  # [B, Bk, V]
        logits = logits.index_fill(-1, never, -torch.inf)  # never draw [MASK]
        drawn = gumbel_max_sample(logits, temperature, generator)  # [B, Bk]
        candidates = sample[:, start : start + block_length] == mask_id  # [B, Bk]
        view = block_view(
            logits, drawn, candidates, step_in_block=step % steps_per_block, steps_per_block=steps_per_block
        )
        choice = decoding.choose(view, greedy=greedy_decisions, generator=generator)
        commit = choice.commit & candidates  # [B, Bk]
        assert torch.equal(commit, choice.commit), "a decoding policy committed a position that is not masked"
        assert bool((commit.any(1) | ~candidates.any(1)).all()), "a decoding policy committed nothing at a step"
        path_logp[:, step] = (view.token_logp * commit).sum(1)
        block = sample[:, start : start + block_length]
        sample[:, start : start + block_length] = torch.where(commit, drawn.to(sample.dtype), block)
        decode_step[:, start - prompt_length : start - prompt_length + block_length][commit] = step
        records.append(choice.record)
    assert not (sample[:, prompt_length:] == mask_id).any(), "the decoding policy left masked answer tokens"
    stacked = {key: torch.stack([r[key] for r in records], dim=1) for key in records[0]}  # [B, S, ...]
    return LearnedGeneration(sample[:, prompt_length:], decode_step, path_logp, stacked, num_forward=steps)


__all__ = ["LearnedGeneration", "block_view", "generate_with_decoding_policy"]
