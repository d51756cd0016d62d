"""RLFR's flow rewards ([209], ``latent_flow_reward``): the rectified-flow error, the field fitted online on the
latents of good responses, the shaping from the field of earlier steps, and the state across a checkpoint."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch, bind_option
from genalign.experimental.credit.latent_flow import VelocityField, flow_matching_error, unit_rms
from genalign.trainer.state_io import load_state, save_state

F64 = torch.float64


def test_unit_rms_and_the_flow_matching_error():
    torch.testing.assert_close(unit_rms(torch.tensor([[3.0, -3.0], [0.0, 2.0]])), torch.tensor([[1.0, -1.0],
                                                                                                [0.0, 2 ** 0.5]]))  # fmt: skip
    field = VelocityField(2, 4, torch.Generator().manual_seed(0)).double()
    with torch.no_grad():
        for parameter in field.parameters():
            parameter.zero_()  # v ≡ 0: the error is ‖x_1 − x_0‖² / H
    latents, noise = torch.tensor([[1.0, 3.0]], dtype=F64), torch.tensor([[0.0, 1.0]], dtype=F64)
    error = flow_matching_error(field, latents, noise, torch.tensor([0.3], dtype=F64))
    torch.testing.assert_close(error, torch.tensor([(1.0 + 4.0) / 2], dtype=F64))


def batch_of(hidden: torch.Tensor, reward: list[float]) -> StepBatch:
    return StepBatch(mask=torch.ones(hidden.shape[:2]), hidden=hidden, combined_reward=torch.tensor(reward))


def test_the_field_learns_the_good_latents_and_credits_on_flow_tokens(tmp_path):
    torch.manual_seed(0)
    good = torch.tensor([1.0, 1.0, -1.0, -1.0]) + 0.05 * torch.randn(2, 6, 4)  # the good responses' latents
    far = torch.tensor([-1.0, 1.0, 1.0, -1.0]).expand(1, 6, 4)
    rule = bind_option(CREDIT_RULES, "latent_flow_reward", {"weight": 1.0, "fit_steps": 60, "lr": 0.02, "probes": 8})
    advantages = torch.zeros(3, 6, dtype=F64)
    first = rule(advantages, batch_of(torch.cat([good, far]), [1.0, 1.0, 0.0]))
    torch.testing.assert_close(first, advantages)  # no field before the first fit: nothing shaped
    assert rule.fits == 1
    mixed = torch.cat([good[:1], far])  # one on-flow response, one off-flow response
    shaped = rule(torch.zeros(2, 6, dtype=F64), batch_of(mixed, [1.0, 0.0]))
    assert shaped[0].mean() > 0.5 > -0.5 > shaped[1].mean()  # z-scores over the batch: on-flow up, off-flow down
    assert float(shaped.sum()) == pytest.approx(0.0, abs=1e-9)
    # the field, its optimizer and its generator survive a checkpoint: the next step is reproduced exactly
    restored = bind_option(
        CREDIT_RULES, "latent_flow_reward", {"weight": 1.0, "fit_steps": 60, "lr": 0.02, "probes": 8}
    )
    save_state(rule.state_dict(), tmp_path / "flow")  # JSON + safetensors, as a checkpoint writes it
    restored.load_state_dict(load_state(tmp_path / "flow"))
    torch.testing.assert_close(restored(advantages[:2], batch_of(mixed, [1.0, 0.0])),
                               rule(advantages[:2], batch_of(mixed, [1.0, 0.0])))  # fmt: skip


def test_bad_hyper_parameters_and_the_unbound_rule():
    with pytest.raises(ValueError, match="fit_steps=0 must be an integer >= 1"):
        bind_option(CREDIT_RULES, "latent_flow_reward", {"fit_steps": 0})
    with pytest.raises(ValueError, match="bind the rule"):
        CREDIT_RULES.get("latent_flow_reward")(torch.zeros(1, 1), batch_of(torch.zeros(1, 1, 2), [1.0]))
