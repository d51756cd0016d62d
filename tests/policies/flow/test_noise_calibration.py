"""DenseGRPO [148] per-timestep noise calibration: hand-computed spread and update, exact re-scoring at calibrated
levels, checkpointed state."""

import numpy as np
import pytest
import torch

from genalign.policies.base import RolloutRequest
from genalign.policies.flow import FlowPolicyConfig, build_policy, flow_lora
from genalign.policies.flow.config import NoiseCalibrationConfig
from genalign.policies.flow.noise_calibration import NoiseCalibrator, step_gain_spread

ROWS = [{"prompt": "two red circles"}, {"prompt": "a blue square"}]


def test_spread_and_update_hand_computed():
    step_rewards = torch.tensor([[0.0, 0.2, 0.6], [0.0, 0.4, 0.4]])
    groups, trained = torch.tensor([0, 0]), torch.ones(2, 2, dtype=torch.bool)
    spread = step_gain_spread(step_rewards, groups, trained)  # gains [.2, .4] and [.4, 0]: population std .1, .2
    torch.testing.assert_close(spread, torch.tensor([0.1, 0.2]))
    calibrator = NoiseCalibrator(NoiseCalibrationConfig(enabled=True), noise_level=0.7, num_steps=2)
    calibrator.update(step_rewards, groups, trained)  # target = mean 0.15, rate 0.5
    torch.testing.assert_close(calibrator.levels, torch.tensor([0.7 * 1.5**0.5, 0.7 * 0.75**0.5]))
    flat = torch.tensor([[0.0, 0.3, 0.3], [0.0, 0.3, 0.3]])  # no spread anywhere: every level rises by max_factor
    calibrator.update(flat, groups, trained)
    torch.testing.assert_close(calibrator.levels, torch.tensor([0.7 * 1.5**0.5 * 1.5, 0.7 * 0.75**0.5 * 1.5]))
    untrained = NoiseCalibrator(NoiseCalibrationConfig(enabled=True), noise_level=0.7, num_steps=2)
    untrained.update(step_rewards, groups, torch.tensor([[True, False], [True, False]]))
    assert untrained.levels[1] == pytest.approx(0.7)  # an untrained step keeps its level


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    torch.set_num_threads(1)
    return save_tiny_pipeline("sd3", tmp_path_factory.mktemp("calibration") / "sd3")


def _policy(model_dir):
    config = FlowPolicyConfig(model=str(model_dir), height=16, width=16, num_steps=3, guidance_scale=1.0,
                              max_sequence_length=8, lora=flow_lora(rank=4, alpha=4.0),
                              noise_calibration=NoiseCalibrationConfig(enabled=True))  # fmt: skip
    return build_policy(config)


def _brightness(rows, outputs):
    return torch.tensor([float(np.asarray(o, dtype=np.float32).mean()) / 255 for o in outputs])


def test_policy_samples_at_calibrated_levels_and_checkpoints_them(model_dir):
    policy = _policy(model_dir)
    request = RolloutRequest(structure=frozenset({"step_rewards"}), reward_probe=_brightness)
    first = policy.rollout(ROWS, group_size=2, request=request)
    levels = policy.calibrator.levels.clone()
    assert not torch.allclose(levels, torch.full((3,), 0.7))  # moved by the measured spreads
    second = policy.rollout(ROWS, group_size=2, request=request)
    stored = second.per_sample["noise_level"]  # [N, S]
    torch.testing.assert_close(stored, second.action_mask.float() * levels[None].to(stored.device))
    assert torch.equal(policy.score(second).logp.detach(), second.old_logp)  # exact at the calibrated levels
    assert first.structure.get("step_std") is not None
    restored = _policy(model_dir)
    restored.load_state_dict(policy.state_dict())
    torch.testing.assert_close(restored.calibrator.levels, policy.calibrator.levels)
    with pytest.raises(ValueError, match="step_rewards"):
        policy.rollout(ROWS, group_size=2)
