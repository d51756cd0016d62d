"""``policy.cfg_batching: batched``: the conditional and unconditional guidance branches in one call of twice the
batch. The samples are those of two calls (up to float rounding), re-scoring a batched rollout is exact (the score path
batches the same way), and the gradient reaches only the conditional branch."""

import pytest
import torch

from genalign.policies.flow import FlowPolicyConfig, build_policy, flow_lora

ROWS = [{"prompt": "two red circles"}, {"prompt": "a blue square"}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    torch.set_num_threads(1)
    return save_tiny_pipeline("sd3", tmp_path_factory.mktemp("cfg") / "sd3")


def _pair(model_dir):
    """A separate and a batched policy with the same (non-zero) LoRA weights."""
    separate, batched = _policy(model_dir, "separate"), _policy(model_dir, "batched")
    with torch.no_grad():
        for target, source in zip(batched.trainable_parameters(), separate.trainable_parameters(), strict=True):
            target.copy_(source)
    return separate, batched


def _policy(model_dir, cfg_batching: str):
    config = FlowPolicyConfig(model=str(model_dir), height=16, width=16, num_steps=3, guidance_scale=4.5,
                              max_sequence_length=8, lora=flow_lora(rank=4, alpha=4.0, init_lora_weights="gaussian"),
                              cfg_batching=cfg_batching)  # fmt: skip
    return build_policy(config)


def test_batched_guidance_samples_like_two_calls_and_rescores_exactly(model_dir):
    separate, batched = _pair(model_dir)
    assert batched.model.arch.batch_cfg and not separate.model.arch.batch_cfg
    a = separate.rollout(ROWS, group_size=2)
    b = batched.rollout(ROWS, group_size=2)
    torch.testing.assert_close(b.per_sample["latents"], a.per_sample["latents"], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(b.old_logp, a.old_logp, rtol=1e-3, atol=1e-3)
    assert torch.equal(batched.score(b).logp.detach(), b.old_logp)  # exact: rollout and score batch alike


def test_only_the_conditional_branch_gets_gradient(model_dir):
    separate, batched = _pair(model_dir)
    rollout = separate.rollout(ROWS, group_size=2)
    grads = []
    for policy in (separate, batched):
        for module in policy.modules_to_train():
            module.train()
        policy.score(rollout).logp.sum().backward()
        grads.append([p.grad.clone() for p in policy.trainable_parameters()])
    for g_separate, g_batched in zip(*grads, strict=True):
        torch.testing.assert_close(g_batched, g_separate, rtol=1e-3, atol=1e-5)
    assert any(g.abs().sum() > 0 for g in grads[0])
