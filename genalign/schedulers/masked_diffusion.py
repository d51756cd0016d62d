"""Generation for masked diffusion language models (LLaDA / Dream style), as a scheduler plus a sampling loop.

The answer starts as ``gen_length`` mask tokens, split into ``gen_length // block_length`` blocks decoded left to
right. Each block gets ``steps // num_blocks`` steps; at every step the model predicts every masked position at once,
a token other than the mask is drawn per position by Gumbel-max sampling at a temperature, and some of the drawn tokens are *committed*
(written into the sequence for good), the others stay masked (shared/reference/formulas.md §6):

* ``"low_confidence"``: commit the ``k`` positions whose drawn token has the highest probability (LLaDA);
* ``"random"``: commit ``k`` positions chosen uniformly at random;
* ``"threshold"``: commit every position whose confidence exceeds ``confidence_threshold``, and never fewer than the
  scheduled ``k`` (so a block always finishes within its steps; confident blocks finish early).

``k`` per step follows the LLaDA schedule: ``block_length // steps_per_block`` tokens, the first
``block_length % steps_per_block`` steps one more. The step at which each token was committed is recorded, which is
what the decoding-trace likelihood proxy (TraceRL) replays.

The scheduler follows the diffusers habit: :meth:`MaskedDiffusionScheduler.set_timesteps` fixes the schedule and
:meth:`MaskedDiffusionScheduler.step` advances one denoising step, returning a small output dataclass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from genalign.schedulers.options import check_generation_args

Remasking = Literal["low_confidence", "random", "threshold"]

#: ``model_fn(input_ids [B, L], attention_mask [B, L] | None) -> logits [B, L, V]`` with logits *aligned* to the
#: input positions (the logits at position ``j`` predict the token at ``j``; shifted models are aligned by the policy).
ModelFn = Callable[[Tensor, Tensor | None], Tensor]


def tokens_per_step(block_length: int, steps_per_block: int) -> list[int]:
    """LLaDA's schedule: ``block_length // steps`` tokens per step, the first ``block_length % steps`` steps one more."""
    base, extra = divmod(block_length, steps_per_block)
    return [base + (1 if s < extra else 0) for s in range(steps_per_block)]


def gumbel_max_sample(logits: Tensor, temperature: float, generator: torch.Generator | None) -> Tensor:
    """Draw ``argmax(logits / τ + Gumbel)`` per position (``τ = 0`` is the argmax). ``logits``: ``[B, L, V]`` -> ``[B, L]``."""
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    uniform = torch.rand(logits.shape, generator=generator, dtype=torch.float64, device=logits.device)
    exponential = (-torch.log(uniform.clamp_min(1e-300))).clamp_min(1e-300)  # [B, L, V] ~ Exp(1)
    gumbel = -torch.log(exponential)  # [B, L, V] ~ Gumbel(0, 1)
    return (logits.double() / temperature + gumbel).argmax(dim=-1)


@dataclass
class MaskedDiffusionSchedulerOutput:
    """Result of one :meth:`MaskedDiffusionScheduler.step`.

    Attributes:
        prev_sample: ``[B, P + T]`` token ids after this step.
        committed: ``[B, P + T]`` bool, the positions committed at this step.
    """

    prev_sample: Tensor
    committed: Tensor


class MaskedDiffusionScheduler:
    """Semi-autoregressive block unmasking schedule with Gumbel-max sampling and configurable remasking.

    Args:
        mask_id: the mask token id.
        gen_length: number of answer tokens ``T``.
        block_length: tokens per block; must divide ``gen_length``.
        temperature: Gumbel-max temperature, 0 for greedy.
        remasking: which drawn tokens are committed at each step (see the module docstring).
        confidence_threshold: for ``remasking="threshold"``, commit every position whose confidence exceeds it.
    """

    def __init__(
        self,
        *,
        mask_id: int | None,
        gen_length: int,
        block_length: int,
        temperature: float = 0.0,
        remasking: Remasking = "low_confidence",
        confidence_threshold: float = 0.9,
    ) -> None:
        if remasking not in ("low_confidence", "random", "threshold"):
            raise ValueError(f"remasking={remasking!r} is not valid; use 'low_confidence', 'random' or 'threshold'.")
        if temperature < 0:
            raise ValueError(f"temperature={temperature} must be >= 0 (0 is greedy).")
        self.mask_id = mask_id
        self.gen_length = gen_length
        self.block_length = block_length
        self.temperature = temperature
        self.remasking = remasking
        self.confidence_threshold = confidence_threshold
        self.schedule: list[tuple[int, int]] = []  # (block index, tokens to commit) per global step

    def set_timesteps(self, steps: int) -> None:
        """Fix the schedule: ``steps`` in all, ``steps / num_blocks`` per block (checked, with a clear error)."""
        check_generation_args(
            gen_length=self.gen_length, block_length=self.block_length, steps=steps, mask_id=self.mask_id
        )
        num_blocks = self.gen_length // self.block_length
        per_block = tokens_per_step(self.block_length, steps // num_blocks)
        self.schedule = [(block, k) for block in range(num_blocks) for k in per_block]

    @property
    def num_steps(self) -> int:
        return len(self.schedule)

    def step(
        self,
        logits: Tensor,
        step_index: int,
        sample: Tensor,
        prompt_length: int,
        *,
        generator: torch.Generator | None = None,
    ) -> MaskedDiffusionSchedulerOutput:
        """Advance one denoising step.

        Args:
            logits: ``[B, P + T, V]`` model logits aligned with ``sample``.
            step_index: index into the schedule set by :meth:`set_timesteps`.
            sample: ``[B, P + T]`` current token ids (prompt followed by the partly masked answer).
            prompt_length: ``P``.
            generator: source of the Gumbel noise and of random remasking.
        """
        block, k = self.schedule[step_index]
        start = prompt_length + block * self.block_length
        end = start + self.block_length
        is_masked = sample == self.mask_id  # [B, L]
        in_block = torch.zeros_like(is_masked)
        in_block[:, start:end] = True
        candidates = is_masked & in_block  # [B, L]

        logits = logits.index_fill(
            -1, torch.tensor([self.mask_id], device=logits.device), -torch.inf
        )  # never draw [MASK]
        drawn = gumbel_max_sample(logits, self.temperature, generator)  # [B, L]
        if self.remasking == "random":
            confidence = torch.rand(sample.shape, generator=generator, device=sample.device, dtype=torch.float64)
        else:
            probs = torch.softmax(logits.double(), dim=-1)  # [B, L, V]
            confidence = probs.gather(-1, drawn.unsqueeze(-1)).squeeze(-1)  # [B, L]
        confidence = confidence.masked_fill(~candidates, -torch.inf)

        count = candidates.sum(dim=1)  # [B]
        take = torch.minimum(torch.full_like(count, k), count)  # [B]
        if self.remasking == "threshold":
            above = ((confidence > self.confidence_threshold) & candidates).sum(dim=1)  # [B]
            take = torch.maximum(take, above)
        order = confidence.argsort(dim=1, descending=True)  # [B, L]
        rank = torch.empty_like(order)
        rank.scatter_(1, order, torch.arange(order.shape[1], device=order.device).expand_as(order))
        committed = (rank < take.unsqueeze(1)) & candidates  # [B, L]
        prev_sample = torch.where(committed, drawn.to(sample.dtype), sample)
        return MaskedDiffusionSchedulerOutput(prev_sample=prev_sample, committed=committed)


@dataclass
class MaskedDiffusionGeneration:
    """Output of :func:`generate`.

    Attributes:
        completion_ids: ``[B, T]`` generated answer tokens (no mask left).
        decode_step: ``[B, T]`` long, the global step (0-based) at which each answer token was committed.
        num_forward: forward passes of the model per sequence.
    """

    completion_ids: Tensor
    decode_step: Tensor
    num_forward: int


@torch.no_grad()
def generate(
    model_fn: ModelFn,
    prompt_ids: Tensor,
    *,
    prompt_attention_mask: Tensor | None = None,
    mask_id: int | None,
    gen_length: int,
    block_length: int,
    steps: int,
    temperature: float = 0.0,
    remasking: Remasking = "low_confidence",
    confidence_threshold: float = 0.9,
    generator: torch.Generator | None = None,
) -> MaskedDiffusionGeneration:
    """Sample answers for a batch of (left-padded) prompts.

    Args:
        model_fn: ``(input_ids [B, L], attention_mask [B, L] | None) -> logits [B, L, V]``, aligned logits.
        prompt_ids: ``[B, P]`` prompt token ids, left-padded.
        prompt_attention_mask: ``[B, P]`` 1 for real prompt tokens, 0 for padding (``None``: no padding).
        mask_id, gen_length, block_length, steps, temperature, remasking, confidence_threshold: see
            :class:`MaskedDiffusionScheduler`; ``steps`` must be divisible by ``gen_length / block_length``.
        generator: random stream for Gumbel noise and random remasking (on the device of ``prompt_ids``).
    """
    scheduler = MaskedDiffusionScheduler(
        mask_id=mask_id,
        gen_length=gen_length,
        block_length=block_length,
        temperature=temperature,
        remasking=remasking,
        confidence_threshold=confidence_threshold,
    )
    scheduler.set_timesteps(steps)
    batch, prompt_length = prompt_ids.shape
    answer = torch.full((batch, gen_length), mask_id, dtype=prompt_ids.dtype, device=prompt_ids.device)
    sample = torch.cat([prompt_ids, answer], dim=1)  # [B, P + T]
    attention_mask = None
    if prompt_attention_mask is not None:
        ones = torch.ones((batch, gen_length), dtype=prompt_attention_mask.dtype, device=prompt_ids.device)
        attention_mask = torch.cat([prompt_attention_mask, ones], dim=1)  # [B, P + T]
    decode_step = torch.full((batch, gen_length), -1, dtype=torch.long, device=prompt_ids.device)
    num_forward = 0
    for step_index in range(scheduler.num_steps):
        block, _ = scheduler.schedule[step_index]
        block_slice = slice(prompt_length + block * block_length, prompt_length + (block + 1) * block_length)
        if not (sample[:, block_slice] == mask_id).any():
            continue  # threshold remasking finished this block early
        logits = model_fn(sample, attention_mask)  # [B, P + T, V]
        num_forward += 1
        out = scheduler.step(logits, step_index, sample, prompt_length, generator=generator)
        decode_step[out.committed[:, prompt_length:]] = step_index
        sample = out.prev_sample
    assert not (sample[:, prompt_length:] == mask_id).any(), "generation left masked answer tokens"
    return MaskedDiffusionGeneration(
        completion_ids=sample[:, prompt_length:], decode_step=decode_step, num_forward=num_forward
    )


def completion_mask_through_first_eos(completion_ids: Tensor, eos_id: int | None) -> Tensor:
    """``[B, T]`` float mask: 1 up to and including the first EOS, 0 after it (all ones without EOS)."""
    if eos_id is None:
        return torch.ones_like(completion_ids, dtype=torch.float32)
    is_eos = (completion_ids == eos_id).long()  # [B, T]
    eos_before = torch.cumsum(is_eos, dim=1) - is_eos  # [B, T] EOS strictly before each position
    return (eos_before == 0).float()
