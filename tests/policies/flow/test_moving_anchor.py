"""SAGE-GRPO's moving anchor [76] (``policy.anchor_every``): the KL reference is a snapshot of the trained weights,
moved to the current weights every ``anchor_every`` steps; with it the KL is zero right after a move and grows as the
weights leave the anchor, while the PPO clip keeps its trust region around the old policy (the dual trust region)."""

import pytest
import torch

from genalign.algorithms.scores import ScoreRequest
from genalign.policies.flow import FlowPolicyConfig, build_policy, flow_lora

ROWS = [{"prompt": "two red circles"}, {"prompt": "a blue square"}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    torch.set_num_threads(1)
    return save_tiny_pipeline("sd3", tmp_path_factory.mktemp("anchor") / "sd3")


def _policy(model_dir, **overrides):
    config = FlowPolicyConfig(model=str(model_dir), height=16, width=16, num_steps=3, guidance_scale=1.0,
                              max_sequence_length=8, lora=flow_lora(rank=4, alpha=4.0), **overrides)  # fmt: skip
    return build_policy(config)


def _nudge(policy, scale: float = 0.05) -> None:
    """Move every trained weight (a stand-in for an optimizer step)."""
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(scale * torch.ones_like(param))


def _kl(policy, rollout) -> torch.Tensor:
    out = policy.score(rollout, ScoreRequest.of(kl="k1"))
    return (out["kl"] * rollout.action_mask).abs().sum()


def test_the_anchor_moves_every_anchor_every_steps_and_is_the_kl_reference(model_dir):
    policy = _policy(model_dir, anchor_every=2)
    rollout = policy.rollout(ROWS, group_size=2)
    start = [p.detach().clone() for p in policy.trainable_parameters()]
    policy.on_step(1)
    assert _kl(policy, rollout) == 0  # the anchor starts at the initial weights
    _nudge(policy)
    policy.on_step(2)  # not a move: (2 - 1) % 2 != 0
    assert all(torch.equal(a, s.float()) for a, s in zip(policy.model.anchor.average, start, strict=True))
    assert _kl(policy, rollout) > 0
    policy.on_step(3)  # a move: the anchor takes the current weights, the KL to it vanishes
    moved = [p.detach().float() for p in policy.trainable_parameters()]
    assert all(torch.equal(a, m) for a, m in zip(policy.model.anchor.average, moved, strict=True))
    assert _kl(policy, rollout) == 0
    # the base model (adapters off) is not the reference any more: the weights differ from it after the nudge
    base = _policy(model_dir)
    for param, trained in zip(base.trainable_parameters(), policy.trainable_parameters(), strict=True):
        param.data.copy_(trained.data)
    assert _kl(base, rollout) > 0


def test_the_anchor_is_checkpointed_and_needs_no_lora(model_dir):
    policy = _policy(model_dir, anchor_every=3)
    _nudge(policy)
    policy.on_step(4)  # move
    state = policy.state_dict()
    restored = _policy(model_dir, anchor_every=3)
    restored.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(restored.model.anchor.average, policy.model.anchor.average))
    with pytest.raises(ValueError, match="anchor"):
        _policy(model_dir).load_state_dict(state)  # a policy without the anchor refuses its state
    assert "kl" in FlowPolicyConfig(model=str(model_dir), lora=flow_lora(rank=0), anchor_every=5).capabilities().signals
    with pytest.raises(ValueError, match="anchor_every=-1"):
        FlowPolicyConfig(model=str(model_dir), anchor_every=-1).validate()
