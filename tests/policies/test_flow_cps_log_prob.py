"""The flow policy's ``log_prob_form`` reaches sampling and scoring (issue 17, fidelity): with Flow-GRPO's published
CPS form the rollout's log-probs are re-scored exactly, and the log-ratios after an update are the Gaussian ones times
``2σ²`` of each step."""

from __future__ import annotations

import math
import os

import pytest
import torch

from genalign.policies.base import ScoreRequest
from genalign.policies.flow import FlowPolicyConfig, build_policy, flow_lora

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROWS = [{"prompt": "two red circles"}, {"prompt": "a blue square"}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    torch.set_num_threads(1)
    return save_tiny_pipeline("sd3", tmp_path_factory.mktemp("tiny_cps") / "sd3")


def _policy(model_dir, form: str):
    config = FlowPolicyConfig(
        model=str(model_dir), height=16, width=16, num_steps=4, eval_num_steps=3, guidance_scale=1.0,
        max_sequence_length=8, lora=flow_lora(rank=4, alpha=4.0), dynamics="cps", noise_level=0.7, log_prob_form=form,
    )  # fmt: skip
    return build_policy(config)


def test_published_cps_form_is_rescored_exactly_and_scales_log_ratios_by_two_sigma_squared(model_dir):
    gaussian, published = _policy(model_dir, "gaussian"), _policy(model_dir, "squared_error")
    assert published.model.scheduler.config.log_prob_form == "squared_error"
    with torch.no_grad():  # the same weights in both policies (LoRA A matrices are drawn at random)
        for a, b in zip(gaussian.trainable_parameters(), published.trainable_parameters(), strict=True):
            a.copy_(b)
    rollout = published.rollout(ROWS, group_size=2)
    assert torch.equal(published.score(rollout, ScoreRequest()).logp.detach(), rollout.old_logp)  # ratio exactly 1
    before = gaussian.score(rollout, ScoreRequest()).logp.detach()  # Gaussian log-probs of the same trajectories
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # one update, the same for both policies
        for a, b in zip(gaussian.trainable_parameters(), published.trainable_parameters(), strict=True):
            step = 0.05 * torch.randn(a.shape, generator=generator)
            a.add_(step)
            b.add_(step)
    gaussian_log_ratio = gaussian.score(rollout, ScoreRequest()).logp.detach() - before  # [n, S]
    published_log_ratio = published.score(rollout, ScoreRequest()).logp.detach() - rollout.old_logp  # [n, S]
    sigmas = published.model.scheduler.sigmas  # [S + 1], the rollout's schedule
    std = sigmas[1 : rollout.num_actions + 1] * math.sin(0.7 * math.pi / 2)  # [S] CPS std of each step
    mask = rollout.action_mask.bool()
    assert gaussian_log_ratio[mask].abs().max() > 1e-3  # the update moved the policy
    expected = 2 * std[None].expand_as(gaussian_log_ratio) ** 2 * gaussian_log_ratio
    # float32 log-probs: a difference of two of them is known to a few ulps of their magnitude
    atol = 8 * torch.finfo(torch.float32).eps * float(rollout.old_logp.abs().max())
    torch.testing.assert_close(published_log_ratio[mask], expected[mask], rtol=1e-3, atol=atol)
