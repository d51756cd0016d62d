"""MA-RLHF macro actions [246] as the ratio level ``macro_action``: one product ratio per n-gram, clipped per macro
action, with the advantage pooled over it; hand-computed losses and gradients."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import policy_loss
from genalign.experimental.ratio_levels.macro import macro_action_ids

F64 = torch.float64


def run(log_ratios, advantages, mask, **hp):
    log_ratio = torch.tensor(log_ratios, dtype=F64)
    logp = log_ratio.clone().requires_grad_(True)
    mask = torch.tensor(mask, dtype=F64)
    advantages = torch.tensor(advantages, dtype=F64)
    loss, _ = policy_loss(logp, torch.zeros_like(logp), advantages, mask, ratio_level="macro_action", **hp)
    (grad,) = torch.autograd.grad((loss * mask).sum(), logp)
    return (loss * mask).detach(), grad


def test_macro_actions_are_windows_of_valid_actions():
    mask = torch.tensor([[0.0, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])  # left padding in row 0, right padding in row 1
    ids, sizes = macro_action_ids(mask, 2)
    assert ids[0, 1:].tolist() == [0, 0, 1, 1, 2] and ids[1, :3].tolist() == [0, 0, 1]
    assert sizes[0, 1:].tolist() == [2, 2, 2, 2, 1] and sizes[1, :3].tolist() == [2, 2, 1]


def test_one_product_ratio_per_macro_action_with_its_pooled_advantage():
    # macro 0 = actions 0, 1 (ℓ 0.1 + 0.05 = 0.15), macro 1 = action 2 (ℓ −0.3); per-action advantages 1, 3, 2
    loss, grad = run([[0.1, 0.05, -0.3]], [[1.0, 3.0, 2.0]], [[1.0, 1.0, 1.0]], clip="none", macro_length=2)
    e0, e1 = math.exp(0.15), math.exp(-0.3)
    torch.testing.assert_close(loss, torch.tensor([[-2 * e0, -2 * e0, -2 * e1]], dtype=F64))  # A_m = mean(1, 3) = 2
    # d/dℓ0 of −2·2·exp(ℓ0 + ℓ1) = −4·e0: the product ratio's gradient reaches every action of the macro action
    torch.testing.assert_close(grad, torch.tensor([[-4 * e0, -4 * e0, -2 * e1]], dtype=F64))


def test_the_macro_action_is_clipped_as_a_whole():
    # ℓ 0.1 + 0.1 = 0.2: e^0.2 = 1.2214 > 1.2 -> clipped for A > 0 although each token ratio (e^0.1) is inside
    loss, grad = run([[0.1, 0.1]], [1.0], [[1.0, 1.0]], clip="ppo", macro_length=2)
    torch.testing.assert_close(loss, torch.tensor([[-1.2, -1.2]], dtype=F64))
    assert bool((grad == 0).all())
    token, _ = run([[0.1, 0.1]], [1.0], [[1.0, 1.0]], clip="ppo", macro_length=1)  # n = 1: the token level
    torch.testing.assert_close(token, torch.tensor([[-math.exp(0.1)] * 2], dtype=F64))
    with pytest.raises(ValueError, match="macro_length"):
        run([[0.1]], [1.0], [[1.0]], macro_length=0)


def test_perplexity_terminations_end_a_macro_action_where_its_perplexity_would_rise():
    from genalign.algorithms import StepBatch
    from genalign.experimental.ratio_levels.macro import perplexity_macro_ids

    # surprisals 1, 0.5, 0.8, 2, 0.1, 0.1 (row 0) : 0.5 <= 1 joins; 0.8 > mean(1, 0.5) = 0.75 starts macro 1;
    # 2 > 0.8 starts macro 2; 0.1 joins; the cap of 2 actions starts macro 3 at the last action
    behaviour = torch.tensor([[-1.0, -0.5, -0.8, -2.0, -0.1, -0.1], [-1.0, -1.0, -3.0, 0.0, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1.0] * 6, [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]], dtype=F64)
    ids, sizes = perplexity_macro_ids(behaviour, mask, max_length=2)
    assert ids.tolist() == [[0, 0, 1, 2, 2, 3], [0, 0, 1, 1, 1, 1]]  # 1 ≤ mean 1 joins; padding continues
    assert sizes.tolist() == [[2, 2, 1, 2, 2, 1], [2, 2, 1, 1, 1, 1]]
    # the level pools and clips per perplexity macro action: macro 0 of row 1 has ℓ 0.1 + 0.05, macro 1 ℓ −0.3
    logp = torch.tensor([[0.1, 0.05, -0.3]], dtype=F64, requires_grad=True)
    batch = StepBatch(behaviour_logp=torch.tensor([[-1.0, -1.0, -3.0]], dtype=F64))
    loss, _ = policy_loss(logp, torch.zeros_like(logp), torch.tensor([[1.0, 3.0, 2.0]], dtype=F64),
                          torch.ones(1, 3, dtype=F64), ratio_level="macro_action", clip="none", macro_length=4,
                          termination="perplexity", batch=batch)  # fmt: skip
    e0, e1 = math.exp(0.15), math.exp(-0.3)
    torch.testing.assert_close(loss.detach(), torch.tensor([[-2 * e0, -2 * e0, -2 * e1]], dtype=F64))
    with pytest.raises(ValueError, match="termination='parse' must be"):
        run([[0.1]], [1.0], [[1.0]], termination="parse")
