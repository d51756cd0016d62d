"""Smart-GRPO [152] search of the initial noise: hand-computed refit, exact behaviour log-probs."""

import numpy as np
import pytest
import torch

from genalign.policies.base import RolloutRequest
from genalign.policies.flow import FlowPolicyConfig, build_policy, flow_lora
from genalign.policies.flow.config import NoiseSearchConfig
from genalign.policies.flow.noise_search import refit

ROWS = [{"prompt": "two red circles"}, {"prompt": "a blue square"}]


def test_refit_moves_to_the_elites():
    candidates = torch.tensor([[[1.0, 1.0], [3.0, 3.0], [-1.0, -1.0]]])  # [B=1, K=3, 2]
    rewards = torch.tensor([[0.5, 0.9, float("nan")]])
    mean, std = refit(torch.zeros(1, 2), torch.ones(1), candidates, rewards, elites=2, smoothing=1.0, min_std=0.0)
    torch.testing.assert_close(mean, torch.tensor([[2.0, 2.0]]))  # elites [3, 3] and [1, 1]
    torch.testing.assert_close(std, torch.tensor([1.0]))
    mean, std = refit(torch.zeros(1, 2), torch.ones(1), candidates, rewards, elites=1, smoothing=0.5, min_std=0.8)
    torch.testing.assert_close(mean, torch.tensor([[1.5, 1.5]]))
    torch.testing.assert_close(std, torch.tensor([0.8]))  # 0.5 * 1 + 0.5 * 0, floored


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    torch.set_num_threads(1)
    return save_tiny_pipeline("sd3", tmp_path_factory.mktemp("search") / "sd3")


def _brightness(rows, outputs):
    return torch.tensor([float(np.asarray(o, dtype=np.float32).mean()) / 255 for o in outputs])


def test_searched_start_keeps_log_probs_exact(model_dir):
    search = NoiseSearchConfig(enabled=True, rounds=2, candidates=4, elites=2)
    config = FlowPolicyConfig(model=str(model_dir), height=16, width=16, num_steps=3, guidance_scale=1.0,
                              max_sequence_length=8, lora=flow_lora(rank=4, alpha=4.0), noise_search=search)  # fmt: skip
    policy = build_policy(config)
    rollout = policy.rollout(ROWS, group_size=2, request=RolloutRequest(reward_probe=_brightness))
    latents = rollout.per_sample["latents"]  # [N, S + 1, ...]
    assert torch.equal(latents[0, 0], latents[1, 0]) and not torch.equal(latents[0, 0], latents[2, 0])
    assert "noise_search/elite_reward_round_1" in rollout.info
    assert torch.equal(policy.score(rollout).logp.detach(), rollout.old_logp)  # the SDE steps are unchanged
    with pytest.raises(ValueError, match="reward probe"):
        policy.rollout(ROWS, group_size=2)
    with pytest.raises(ValueError, match="shared"):
        FlowPolicyConfig(model="x", noise_search=search, group_initial_noise="shared").validate()
