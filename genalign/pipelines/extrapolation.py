"""Test-time extrapolation along the RL update direction (the test-time method of [266]): decode from a trained
causal LM and its base model together, amplifying the trained model along ``Δlog p = log π_RL − log π_base``.

At every step the next-token log-probabilities of both models give

    log π_ex(v) = log π_RL(v) + α·(log π_RL(v) − log π_base(v))   (renormalised over the vocabulary),

and the next token is drawn from ``π_ex`` at ``temperature`` (greedy at 0). ``α = 0`` is plain decoding from the
trained model. Both models keep their own key-value cache, so one step costs one forward of each.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def extrapolated_logprobs(policy_logits: Tensor, base_logits: Tensor, alpha: float) -> Tensor:
    """``[B, V]`` ``log_softmax((1 + α)·log π_RL − α·log π_base)`` of the two models' next-token logits ``[B, V]``."""
    policy = torch.log_softmax(policy_logits.float(), -1)
    base = torch.log_softmax(base_logits.float(), -1)
    return torch.log_softmax(policy + alpha * (policy - base), -1)


class _Stepper:
    """One model's incremental forward over a left-padded batch (its own cache)."""

    def __init__(self, model: nn.Module, prompt_ids: Tensor, prompt_mask: Tensor) -> None:
        self.model, self.mask, self.cache = model, prompt_mask.long(), None
        self.positions = (self.mask.cumsum(1) - 1).clamp_min(0)
        self.next_input = prompt_ids

    def logits(self) -> Tensor:
        width = self.next_input.shape[1]
        output = self.model(input_ids=self.next_input, attention_mask=self.mask, past_key_values=self.cache,
                            position_ids=self.positions[:, -width:], use_cache=True)  # fmt: skip
        self.cache = output.past_key_values
        return output.logits[:, -1]  # [B, V]

    def advance(self, tokens: Tensor) -> None:
        self.next_input = tokens[:, None]
        self.mask = torch.cat([self.mask, torch.ones_like(tokens[:, None])], 1)
        self.positions = torch.cat([self.positions, self.positions[:, -1:] + 1], 1)


@torch.no_grad()
def extrapolated_generate(
    policy: nn.Module,
    base: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    *,
    alpha: float,
    max_new_tokens: int,
    eos_token_id: int,
    pad_token_id: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """``[B, W]`` completions (``W <= max_new_tokens``; ``pad_token_id`` after a row's EOS) decoded from the
    extrapolated distribution (module docstring).

    Args:
        policy, base: the trained model and its base (the same tokenizer; e.g. the reference before training).
        prompt_ids, prompt_mask: ``[B, P]`` left-padded prompts.
        alpha: ``α >= 0``, the extrapolation strength.
        temperature: ``> 0`` samples from ``π_ex^(1/T)``; ``0`` takes the most likely token.
        generator: the sampling generator (None: torch's default).
    """
    if not alpha >= 0:
        raise ValueError(f"extrapolated_generate: alpha={alpha!r} must be >= 0 (0: plain decoding)")
    if not temperature >= 0 or max_new_tokens < 1:
        raise ValueError(f"extrapolated_generate: need temperature >= 0 and max_new_tokens >= 1, got {temperature!r}, "
                         f"{max_new_tokens!r}")  # fmt: skip
    models = [_Stepper(policy, prompt_ids, prompt_mask), _Stepper(base, prompt_ids, prompt_mask)]
    done = torch.zeros(prompt_ids.shape[0], dtype=torch.bool, device=prompt_ids.device)
    tokens_out = []
    for _ in range(max_new_tokens):
        logp = extrapolated_logprobs(models[0].logits(), models[1].logits(), alpha)  # [B, V]
        if temperature == 0:
            tokens = logp.argmax(-1)
        else:
            probs = torch.softmax(logp / temperature, -1)
            tokens = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).to(logp.device)
        tokens = torch.where(done, torch.full_like(tokens, pad_token_id), tokens)
        tokens_out.append(tokens)
        done = done | (tokens == eos_token_id)
        if bool(done.all()):
            break
        for stepper in models:
            stepper.advance(tokens)
    return torch.stack(tokens_out, 1)


__all__ = ["extrapolated_generate", "extrapolated_logprobs"]
