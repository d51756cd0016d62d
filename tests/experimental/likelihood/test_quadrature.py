"""GDPO's semi-deterministic Monte-Carlo ELBO [36]: quadrature rule, exact cases, zero variance over the noise level."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.experimental.likelihood.quadrature import quadrature_rule
from genalign.policies.dlm.likelihood import LIKELIHOOD_PROXIES

MASK = 2  # real tokens 0, 1; mask id 2
PROMPT = torch.tensor([[1, 0]])


def count_model(a: float):
    """Toy whose log-probability of token 0 at every answer position is ``−a · (masked answer positions)``.

    ``p(0) = exp(−a·c)``, ``p(1) = 1 − p(0)``: logits ``[0, log(exp(a·c) − 1), ·]`` (the mask logit is excluded).
    """

    def model_fn(ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        count = (ids[:, PROMPT.shape[1] :] == MASK).sum(dim=1, keepdim=True).double()  # [B, 1]
        other = torch.log(torch.expm1(a * count)).float()  # [B, 1], -inf when nothing is masked
        logits = torch.zeros(*ids.shape, 3)
        logits[..., 1] = other.expand(-1, ids.shape[1])
        return logits

    return model_fn


def estimates(name: str, length: int, seeds: int, a: float = 0.3, **hp) -> torch.Tensor:
    """``[seeds]`` sequence estimates (token terms summed) of the all-zero answer of ``length`` tokens."""
    out = LIKELIHOOD_PROXIES.get(name)(
        count_model(a),
        PROMPT.expand(seeds, -1),
        torch.zeros(seeds, length, dtype=torch.long),
        torch.ones(seeds, length),
        mask_id=MASK,
        seeds=torch.arange(seeds) * 7919 + 1,
        level="token",
        **hp,
    )
    return out.logp.sum(dim=1).double()


def test_gauss_legendre_nodes_are_the_hand_computed_ones_and_exact_to_degree_2k_minus_1():
    nodes, weights = quadrature_rule("gauss_legendre", 2)
    assert nodes == pytest.approx([0.5 - math.sqrt(3) / 6, 0.5 + math.sqrt(3) / 6])
    assert weights == pytest.approx([0.5, 0.5])
    for k in (1, 2, 3, 5):
        nodes, weights = quadrature_rule("gauss_legendre", k)
        for degree in range(2 * k):
            assert sum(w * t**degree for t, w in zip(nodes, weights)) == pytest.approx(1 / (degree + 1))
    assert quadrature_rule("midpoint", 4) == ([0.125, 0.375, 0.625, 0.875], [0.25] * 4)


def test_count_masks_with_midpoint_nodes_give_the_closed_form_elbo_with_zero_variance_unlike_double_mc():
    # lp_j(S) = −a·|S| for every j: ELBO = Σ_l (1/l) · l · (−a·l) = −a · L(L+1)/2, whatever subsets are drawn.
    length, a = 4, 0.3
    closed_form = -a * length * (length + 1) / 2  # = −3.0
    gdpo = estimates("gdpo_quadrature", length, 64, a, num_nodes=length, quadrature="midpoint", mask_sampling="count")
    assert torch.allclose(gdpo, torch.full_like(gdpo, closed_form), atol=1e-5)  # every seed: exact, variance 0
    for draws in (1, 2):  # random levels (K < L strata): the same mask law gives a spread over seeds
        double_mc = estimates("mc_elbo", length, 256, a, num_samples=draws, mask_sampling="count")
        assert double_mc.var().item() > 0.1
        assert double_mc.mean().item() == pytest.approx(closed_form, abs=0.3)  # unbiased all the same


def test_rate_masks_with_one_gauss_node_are_unbiased_for_a_linear_integrand():
    # Bernoulli(t) masks: f(t) = (1/t)·E[−a|S|²] = −a·L·(1 − t + L·t), linear, so one node (t = ½) integrates it
    # exactly: E[estimate] = f(½) = −a·L(L+1)/2 = ∫_0^1 f.
    length, a = 3, 0.5
    gdpo = estimates("gdpo_quadrature", length, 4000, a, num_nodes=1, mask_sampling="rate")
    standard_error = gdpo.std().item() / math.sqrt(gdpo.numel())
    assert gdpo.mean().item() == pytest.approx(-a * length * (length + 1) / 2, abs=4 * standard_error)


def test_quadrature_beats_double_monte_carlo_with_the_same_rate_masks_and_passes():
    # Both estimators draw Bernoulli(t) masks with 1/t weights and spend 2 passes; only the levels differ.
    gdpo = estimates("gdpo_quadrature", 4, 400, num_nodes=2, mask_sampling="rate")
    double_mc = estimates("mc_elbo", 4, 400, num_samples=2, mask_sampling="rate")
    assert gdpo.var().item() < double_mc.var().item()


def test_forward_passes_weights_and_validation():
    out = LIKELIHOOD_PROXIES.get("gdpo_quadrature")(
        count_model(0.3), PROMPT, torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 4), mask_id=MASK,
        seeds=torch.tensor([5]), num_nodes=3, masks_per_node=2,
    )  # fmt: skip
    assert out.num_forward == 6 and out.logp.shape == (1, 1) and out.mask.tolist() == [[1.0]]
    call = LIKELIHOOD_PROXIES.get("gdpo_quadrature")
    args = (count_model(0.3), PROMPT, torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 4))
    with pytest.raises(ValueError, match="num_nodes=0 must be a positive integer"):
        call(*args, mask_id=MASK, seeds=torch.tensor([0]), num_nodes=0)
    with pytest.raises(ValueError, match="quadrature='simpson' is not valid"):
        call(*args, mask_id=MASK, seeds=torch.tensor([0]), quadrature="simpson")
    with pytest.raises(ValueError, match="masks_per_node=0"):
        call(*args, mask_id=MASK, seeds=torch.tensor([0]), masks_per_node=0)
