"""Test-time extrapolation along Δlog p ([266], :func:`genalign.pipelines.extrapolation.extrapolated_generate`): the
extrapolated distribution on hand values, and cached decoding equal to a naive full recomputation with both models."""

from __future__ import annotations

import copy
import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.pipelines.extrapolation import extrapolated_generate, extrapolated_logprobs
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy

torch.set_num_threads(1)


def test_the_extrapolated_distribution():
    policy = torch.tensor([[math.log(0.5), math.log(0.25), math.log(0.25)]])
    base = torch.tensor([[math.log(0.25), math.log(0.25), math.log(0.5)]])
    # α = 1: p ∝ p_RL² / p_base = (1, 0.25, 0.125) -> (8, 2, 1)/11
    torch.testing.assert_close(extrapolated_logprobs(policy, base, 1.0).exp(), torch.tensor([[8.0, 2.0, 1.0]]) / 11)
    torch.testing.assert_close(extrapolated_logprobs(policy, base, 0.0).exp(), torch.tensor([[0.5, 0.25, 0.25]]))


def naive_decode(policy, base, ids, mask, alpha, steps, eos):
    """Greedy extrapolated decoding by recomputing both models over the whole sequence at every step."""
    out, done = [], torch.zeros(ids.shape[0], dtype=torch.bool)
    for _ in range(steps):
        positions = (mask.cumsum(1) - 1).clamp_min(0)
        logits = [m(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1] for m in (policy, base)]
        token = extrapolated_logprobs(*logits, alpha).argmax(-1)
        token = torch.where(done, torch.full_like(token, 0), token)
        out.append(token)
        done |= token == eos
        if bool(done.all()):
            break
        ids, mask = torch.cat([ids, token[:, None]], 1), torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    return torch.stack(out, 1)


@pytest.mark.parametrize("alpha", [0.0, 2.0])
def test_cached_decoding_equals_the_naive_recomputation(alpha):
    policy = build_policy(CausalLMPolicyConfig(model="builtin:arith-lm", max_new_tokens=4)).model.eval()
    base = copy.deepcopy(policy)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for parameter in base.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    tokenizer_ids = {"1+2=": [4, 13, 5, 16], "12+34=": [4, 5, 13, 6, 7, 16]}  # the arith vocabulary's ids
    pad = 0
    rows = list(tokenizer_ids.values())
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    with torch.no_grad():
        expected = naive_decode(policy, base, ids, mask, alpha, 4, eos=1)
    got = extrapolated_generate(policy, base, ids, mask, alpha=alpha, max_new_tokens=4, eos_token_id=1,
                                pad_token_id=pad, temperature=0.0)  # fmt: skip
    assert torch.equal(got, expected)
    with pytest.raises(ValueError, match="alpha=-1 must be >= 0"):
        extrapolated_generate(policy, base, ids, mask, alpha=-1, max_new_tokens=1, eos_token_id=1, pad_token_id=0)
