"""[219] Advantage Reweighting (credit rule ``probability_damping``) and Lopti (objective ``lopti``, two update phases)
against hand-computed values; the config loader accepts both on the arith-lm demo."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, OBJECTIVES, ScoreOutput, StepBatch
from genalign.config import ConfigError
from tests.algorithms.arith_config import arith_lm_config

F64 = torch.float64


def damping(advantages, probs, mask, **hp):
    logp = torch.tensor(probs, dtype=F64).log()
    inputs = StepBatch(
        sample_advantages=advantages,
        mask=mask,
        group_ids=torch.zeros(len(advantages), dtype=torch.long),
        behaviour_logp=logp,
    )
    return CREDIT_RULES.get("probability_damping")(advantages[:, None].expand(mask.shape).clone(), inputs, **hp)


def test_probability_damping_scales_by_a_linear_function_of_the_token_probability():
    advantages = torch.tensor([2.0, -1.0], dtype=F64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    out = damping(advantages, [[0.5, 1.0], [0.1, 0.2]], mask, alpha=0.3)
    # w = 0.3·p + 0.7: [[0.85, 1.0], [0.73, (padding) 1]] -> both signs are damped alike
    torch.testing.assert_close(out, torch.tensor([[1.7, 2.0], [-0.73, -1.0]], dtype=F64))
    assert torch.equal(
        damping(advantages, [[0.5, 1.0], [0.1, 0.2]], mask, alpha=0.0), out.new_tensor([[2, 2], [-1, -1]])
    )
    with pytest.raises(ValueError, match="alpha must be in"):
        damping(advantages, [[0.5, 1.0], [0.1, 0.2]], mask, alpha=1.5)


def lopti_loss(phase, *, low_first=True, threshold=0.5):
    old = torch.tensor([[0.2, 0.8, 0.6]]).log()  # token 0 is a low-probability token (< 0.5), 1 and 2 are not
    logp = old.clone().requires_grad_(True)  # on-policy: every ratio is 1
    context = StepBatch(old_logp=old, mask=torch.ones(1, 3), phase=phase)
    loss, metrics = OBJECTIVES.get("lopti")(
        ScoreOutput(logp=logp), torch.tensor([2.0]), context, threshold=threshold, low_first=low_first
    )
    loss.sum().backward()
    return loss.detach(), logp.grad, metrics


def test_lopti_trains_low_probability_tokens_in_the_first_phase_and_the_rest_in_the_second():
    loss, grad, metrics = lopti_loss(0)
    # phase 0: only token 0 (p = 0.2 < η = 0.5): loss −A·ρ = −2, gradient −2 on its log-prob, nothing elsewhere
    assert loss.tolist() == [[-2.0, 0.0, 0.0]] and grad.tolist() == [[-2.0, 0.0, 0.0]]
    assert metrics["phase_token_frac"].item() == pytest.approx(1 / 3)
    loss, grad, _ = lopti_loss(1)
    assert loss.tolist() == [[0.0, -2.0, -2.0]] and grad.tolist() == [[0.0, -2.0, -2.0]]
    assert lopti_loss(0, low_first=False)[0].tolist() == [[0.0, -2.0, -2.0]]  # high-probability tokens first
    assert lopti_loss(0, threshold=0.7)[0].tolist() == [[-2.0, 0.0, -2.0]]  # 0.6 < 0.7 joins the first phase


def test_lopti_second_phase_ratio_carries_the_first_phase_change():
    old = torch.tensor([[math.log(0.2), math.log(0.8)]])
    logp = torch.tensor([[math.log(0.3), math.log(0.88)]], requires_grad=True)  # after phase 0: ratios 1.5, 1.1
    context = StepBatch(old_logp=old, mask=torch.ones(1, 2), phase=1)
    loss, _ = OBJECTIVES.get("lopti")(ScoreOutput(logp=logp), torch.tensor([1.0]), context, eps_high=0.2)
    torch.testing.assert_close(loss.detach(), torch.tensor([[0.0, -1.1]]))  # token 1: −A·ρ, ρ = 1.1 inside the clip


def test_lopti_needs_the_phase_and_validates_its_threshold():
    context = StepBatch(old_logp=torch.zeros(1, 1), mask=torch.ones(1, 1))
    with pytest.raises(ValueError, match=r"the signal 'phase'"):
        OBJECTIVES.get("lopti")(ScoreOutput(logp=torch.zeros(1, 1)), torch.ones(1), context)
    with pytest.raises(ValueError, match="threshold must be in"):
        OBJECTIVES.get("lopti")(ScoreOutput(logp=torch.zeros(1, 1)), torch.ones(1), context, threshold=1.0)


def test_config_accepts_ar_and_lopti_on_the_causal_lm():
    config = arith_lm_config(
        credit=[{"name": "probability_damping", "alpha": 0.3}],
        objective={"name": "lopti", "threshold": 0.5}, clip={"name": "ppo", "eps_high": 0.28},
    )  # fmt: skip
    assert config.algorithm.update_phases() == 2 and config.algorithm.optimizer_steps_per_update() == 2
    assert not config.algorithm.fully_on_policy  # the second phase needs the old log-probs
    with pytest.raises(ConfigError, match=r"eps_hihg.*Did you mean 'eps_high'"):
        arith_lm_config(objective="lopti", clip={"name": "ppo", "eps_hihg": 0.28})
    with pytest.raises(ConfigError, match="'eps_high' is a keyword of clip form 'ppo'"):
        arith_lm_config(objective={"name": "lopti", "eps_high": 0.28})
