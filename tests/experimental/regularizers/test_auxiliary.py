"""Fixed-weight auxiliary objectives: GRPO-SR's NLL on good samples [52] (``reward_gated_nll``) and LA-GRPO's
policy-gradient anchor on functional tokens [310] (``functional_token_anchor``)."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import REGULARIZERS, ScoreOutput, StepBatch
from genalign.algorithms.options import bind_option

F64 = torch.float64
NAN = float("nan")


def test_nll_only_on_samples_better_than_their_group_or_above_a_reward():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.5], [-3.0, -1.0]], dtype=F64, requires_grad=True)
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]], dtype=F64)
    batch = StepBatch(mask=mask, combined_reward=torch.tensor([1.0, 0.2, NAN], dtype=F64))
    nll = REGULARIZERS.get("reward_gated_nll")
    by_sign = nll(ScoreOutput(logp), torch.tensor([0.5, -0.5, 0.1], dtype=F64), batch)
    torch.testing.assert_close(by_sign.detach(), torch.tensor([[1.0, 2.0], [0.0, 0.0], [3.0, 1.0]], dtype=F64))
    (grad,) = torch.autograd.grad(by_sign.sum(), logp)
    torch.testing.assert_close(grad, torch.tensor([[-1.0, -1.0], [0.0, 0.0], [-1.0, -1.0]], dtype=F64))
    by_reward = nll(ScoreOutput(logp), torch.zeros(3, dtype=F64), batch, min_reward=0.2)  # NaN never passes
    torch.testing.assert_close(by_reward.detach(), torch.tensor([[1.0, 2.0], [0.5, 0.0], [0.0, 0.0]], dtype=F64))


def anchor_inputs(ratios, advantages, action_ids):
    old = torch.full((1, len(ratios)), -1.0, dtype=F64)
    logp = (old + torch.log(torch.tensor([ratios], dtype=F64))).requires_grad_(True)
    batch = StepBatch(mask=torch.ones_like(old), old_logp=old, action_ids=torch.tensor([action_ids]))
    return logp, torch.tensor(advantages, dtype=F64), batch


def test_the_anchor_is_a_clipped_policy_gradient_on_functional_tokens_only():
    logp, adv, batch = anchor_inputs([1.1, 1.5, 1.1, 0.5], [2.0], [7, 7, 3, 9])
    anchor = bind_option(REGULARIZERS, "functional_token_anchor", {"token_ids": [7, 9]})
    loss = anchor(ScoreOutput(logp), adv, batch)
    # tokens 7, 7, 9 are functional: −A·ρ, capped at 1 + ε for A > 0 (second action); token 3 is ordinary
    torch.testing.assert_close(loss.detach(), torch.tensor([[-2.2, -2.4, 0.0, -1.0]], dtype=F64))
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    torch.testing.assert_close(grad, torch.tensor([[-2.2, 0.0, 0.0, -1.0]], dtype=F64))  # the clipped one is stopped


def test_the_anchor_needs_token_ids_when_the_config_loads():
    with pytest.raises(ValueError, match=r"token_ids must be a non-empty list of token ids"):
        bind_option(REGULARIZERS, "functional_token_anchor", {})
    with pytest.raises(ValueError, match=r"got \[3, -1\]"):
        bind_option(REGULARIZERS, "functional_token_anchor", {"token_ids": [3, -1]})
