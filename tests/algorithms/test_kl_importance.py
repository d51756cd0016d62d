"""The importance-corrected KL term (issue 17, fidelity): TRL 1.16 multiplies its k3 KL by the importance ratio
``πθ/π_old`` by default (``use_bias_correction_kl``). genalign's option ``algorithm.kl_importance_correction`` gives the
same term; with it off, genalign's k3 is TRL's uncorrected term.

TRL exposes no standalone function for it (the term is computed inside ``GRPOTrainer._compute_loss``), so the formula is
written out here from its source, ``trl/trainer/grpo_trainer.py`` (TRL 1.16.0) lines 3082-3105::

    log_ratio = per_token_logps - old_per_token_logps
    log_importance_weights = log_ratio                                     # "token"
    log_importance_weights = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # "sequence", then unsqueeze
    coef_1 = torch.exp(log_importance_weights)
    per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
    if self.args.use_bias_correction_kl:
        per_token_kl = per_token_kl * coef_1

and :func:`test_the_installed_trl_still_writes_the_formula` checks that the installed TRL still contains those lines.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from genalign.algorithms.kl import importance_weighted_kl, kl_k3


def _trl_kl(logp, old, ref, mask, *, correction: bool, level: str = "token"):
    log_ratio = logp - old
    if level == "token":
        log_importance_weights = log_ratio
    else:
        log_importance_weights = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_importance_weights)
    per_token_kl = torch.exp(ref - logp) - (ref - logp) - 1
    return per_token_kl * coef_1 if correction else per_token_kl


def _inputs(seed: int):
    generator = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(4, 7, generator=generator, dtype=torch.float64) * 3).requires_grad_()
    old = logp.detach() + 0.3 * torch.randn(4, 7, generator=generator, dtype=torch.float64)
    ref = logp.detach() + 0.5 * torch.randn(4, 7, generator=generator, dtype=torch.float64)
    mask = (torch.arange(7)[None] < torch.tensor([[7], [5], [3], [1]])).double()
    return logp, old, ref, mask


def _value_and_grad(fn, logp, mask):
    logp.grad = None
    value = fn()
    (value * mask).sum().backward()
    return value.detach() * mask, logp.grad.clone()


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_corrected_kl_equals_trl_bias_corrected_kl_in_value_and_gradient(seed, level):
    logp, old, ref, mask = _inputs(seed)
    ours, our_grad = _value_and_grad(
        lambda: importance_weighted_kl(kl_k3(logp, ref), logp, old, mask, level=level), logp, mask
    )
    theirs, their_grad = _value_and_grad(
        lambda: _trl_kl(logp, old, ref, mask, correction=True, level=level), logp, mask
    )
    # measured over 20 seeds × 2 levels: max |Δ value| 4.4e-16, max |Δ grad| 8.9e-16 in float64 (4.8e-7 / 2.4e-7 in
    # float32): the same formula, expm1(δ) − δ vs exp(δ) − δ − 1 aside
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(our_grad, their_grad, rtol=1e-12, atol=1e-12)


def test_without_the_correction_genalign_k3_is_trl_uncorrected_kl():
    logp, old, ref, mask = _inputs(3)
    ours, our_grad = _value_and_grad(lambda: kl_k3(logp, ref), logp, mask)
    theirs, their_grad = _value_and_grad(lambda: _trl_kl(logp, old, ref, mask, correction=False), logp, mask)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(our_grad, their_grad, rtol=1e-12, atol=1e-12)


def test_on_policy_the_value_is_unchanged_but_the_gradient_gains_k_times_grad_logp():
    # one action: logp = log 0.5, ref = log 0.25 -> δ = −log 2, k3 = 0.5 + log 2 − 1 = log 2 − 0.5; dk3/dlogp = 1 − e^δ = 0.5
    logp = torch.tensor([[math.log(0.5)]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[math.log(0.25)]], dtype=torch.float64)
    mask = torch.ones(1, 1, dtype=torch.float64)
    corrected = importance_weighted_kl(kl_k3(logp, ref), logp, logp.detach(), mask)
    assert corrected.item() == pytest.approx(math.log(2) - 0.5, abs=1e-15)  # ρ = 1 on-policy
    corrected.sum().backward()
    # ∇(k·ρ) = ∇k + k·∇logπ = 0.5 + (log 2 − 0.5) = log 2
    assert logp.grad.item() == pytest.approx(math.log(2), abs=1e-12)


def test_padding_is_zero_and_bad_level_is_rejected():
    logp, old, _ref, mask = _inputs(4)
    logp = logp.detach().masked_fill(mask == 0, -torch.inf)  # padding may hold anything
    out = importance_weighted_kl(torch.ones_like(logp), logp, old, mask)
    assert torch.all(out[mask == 0] == 0) and torch.isfinite(out).all()
    with pytest.raises(ValueError, match="level must be 'token' or 'sequence'"):
        importance_weighted_kl(torch.ones_like(logp), logp, old, mask, level="step")


def test_the_installed_trl_still_writes_the_formula():
    spec = importlib.util.find_spec("trl")
    if spec is None or spec.origin is None:
        pytest.skip("trl is not installed")
    source = (Path(spec.origin).parent / "trainer" / "grpo_trainer.py").read_text()
    assert "coef_1 = torch.exp(log_importance_weights)" in source
    assert "if self.args.use_bias_correction_kl:\n                per_token_kl = per_token_kl * coef_1" in source


def test_the_update_uses_the_configured_correction():
    from genalign.config.schema import AlgorithmConfig

    logp, old, ref, mask = _inputs(5)
    kl = kl_k3(logp, ref)
    plain = AlgorithmConfig(kl_coef=0.1).loss_plan()
    assert plain._kl_term(kl, logp, old, mask) is kl  # default: TRL with the correction off
    sequence = AlgorithmConfig(kl_coef=0.1, kl_importance_correction="sequence").loss_plan()
    corrected = sequence._kl_term(kl, logp, old, mask)
    torch.testing.assert_close(
        corrected * mask, _trl_kl(logp, old, ref, mask, correction=True, level="sequence") * mask
    )
