"""DiffusionNFT and V-GRPO (ELBO surrogate) on a tiny SD3: hand-computed loss pieces, exact proxy old log-probs,
the registered `nft` objective on the scorer's velocity predictions, the decayed old model and a learning step."""

import os

import pytest
import torch

from genalign.algorithms import OBJECTIVES, StepBatch, policy_loss
from genalign.algorithms.objectives import nft_loss, optimality_probability
from genalign.policies.base import ScoreRequest
from genalign.policies.flow import FlowPolicyConfig, LikelihoodFreeConfig, TreeRolloutConfig, build_policy, flow_lora
from genalign.policies.flow.scoring import FlowMatchingScorer, noised
from genalign.policies.flow.stored import CLEAN

NFT = OBJECTIVES.get("nft")
VELOCITY = ScoreRequest.of("velocity")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROWS = [{"prompt": "two red circles"}, {"prompt": "a blue square"}]


@pytest.fixture(scope="module")
def sd3_dir(tmp_path_factory):
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    torch.set_num_threads(1)
    return save_tiny_pipeline("sd3", tmp_path_factory.mktemp("tiny_lf_sd3") / "sd3")


def _policy(model_dir, method: str, **lf):
    config = FlowPolicyConfig(
        model=str(model_dir), height=16, width=16, num_steps=3, eval_num_steps=2, guidance_scale=3.0,
        max_sequence_length=8, lora=flow_lora(rank=4, alpha=4.0),
        likelihood_free=LikelihoodFreeConfig(method=method, num_timesteps=2, **lf),
    )  # fmt: skip
    return build_policy(config)


def _perturb(policy, scale: float = 0.05) -> None:
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(scale * torch.randn(param.shape, generator=generator))


def test_nft_pieces_match_hand_values():
    assert optimality_probability(torch.tensor([2.0, -0.5, 0.0]), clip=1.0).tolist() == [1.0, 0.25, 0.5]
    v_theta, v_old, target = torch.ones(1, 1), torch.full((1, 1), 0.5), torch.zeros(1, 1)
    # beta 1: v+ = v_theta = 1 (error 1), v- = 2 v_old - v_theta = 0 (error 0)
    assert nft_loss(v_theta, v_old, target, torch.tensor([0.75]), beta=1.0).item() == pytest.approx(0.75)
    # beta 0.5: v+ = 0.75 (error 0.5625), v- = 1.5 * 0.5 - 0.5 = 0.25 (error 0.0625)
    loss = nft_loss(v_theta, v_old, target, torch.tensor([0.5]), beta=0.5)
    assert loss.item() == pytest.approx(0.5 * 0.5625 + 0.5 * 0.0625)
    x, v_star = noised(torch.full((1, 2), 2.0), torch.tensor([0.25]), torch.zeros(1, 2))
    assert x.tolist() == [[1.5, 1.5]] and v_star.tolist() == [[-2.0, -2.0]]


def test_vgrpo_proxy_old_logp_is_exact_and_a_positive_advantage_raises_it(sd3_dir):
    policy = _policy(sd3_dir, "elbo")
    assert isinstance(policy.scorer, FlowMatchingScorer) and policy.old is None  # the shared ratio objective
    assert policy.capabilities.signals == {"kl", "ref_logp"}
    rollout = policy.rollout(ROWS, group_size=2)
    with torch.no_grad():  # the reference's ELBO proxy at the same points: the policy's while LoRA is zero
        assert torch.equal(policy.score(rollout, ScoreRequest.of("ref_logp"))["ref_logp"], rollout.old_logp)
    assert rollout.old_logp.shape == rollout.action_mask.shape == (4, 2)
    assert rollout.per_sample[CLEAN].shape[0] == 4 and "latents" not in rollout.per_sample
    policy.model.transformer.train()
    scored = policy.score(rollout)
    assert torch.allclose(scored.logp.detach(), rollout.old_logp, atol=1e-6)  # first ratio 1
    assert bool((rollout.old_logp < 0).all())  # -error
    optimizer = torch.optim.SGD(policy.trainable_parameters(), lr=0.05)
    advantages = torch.tensor([1.0, 1.0, 0.0, 0.0])
    loss, _ = policy_loss(scored.logp, rollout.old_logp, advantages, rollout.action_mask, clip="ppo")
    loss.sum().backward()
    optimizer.step()
    with torch.no_grad():
        after = policy.score(rollout).logp
    assert bool((after[:2] > rollout.old_logp[:2]).all()), "the proxy likelihood of rewarded samples must rise"


def test_nft_objective_zero_advantage_gives_no_gradient_and_old_model_decays(sd3_dir):
    policy = _policy(sd3_dir, "nft", old_decay=0.5)
    assert "velocity" in policy.capabilities.signals
    rollout = policy.rollout(ROWS, group_size=2)
    assert torch.equal(rollout.old_logp, torch.zeros(4, 2))
    policy.model.transformer.train()
    params = policy.trainable_parameters()
    out = policy.score(rollout, VELOCITY)
    loss, metrics = NFT(out, torch.zeros(4), StepBatch())
    assert loss.shape == (4, 2) and metrics["nft/optimality_mean"] == pytest.approx(0.5)
    # old == theta and r = 1/2: the positive and negative terms cancel exactly in the gradient
    grads = torch.autograd.grad(loss.sum(), params, allow_unused=True)
    assert max(float(g.abs().max()) for g in grads if g is not None) < 1e-6
    out = policy.score(rollout, VELOCITY)
    loss, _ = NFT(out, torch.ones(4), StepBatch())
    grads = torch.autograd.grad(loss.sum(), params, allow_unused=True)
    assert max(float(g.abs().max()) for g in grads if g is not None) > 0
    with pytest.raises(ValueError, match="velocity"):
        NFT(policy.score(rollout), torch.ones(4), StepBatch())  # not requested: no predictions
    before = [p.detach().clone() for p in params]
    _perturb(policy)
    policy.after_optimizer_step()
    for old, start, param in zip(policy.old.average, before, params, strict=True):
        assert torch.allclose(old, 0.5 * start + 0.5 * param.detach(), atol=1e-7)


def test_nft_training_step_lowers_the_error_of_rewarded_samples(sd3_dir):
    policy = _policy(sd3_dir, "nft")
    rollout = policy.rollout(ROWS, group_size=2)
    policy.model.transformer.train()
    optimizer = torch.optim.SGD(policy.trainable_parameters(), lr=0.05)
    with torch.no_grad():
        before = -policy.score(rollout).logp  # errors [4, 2]
    out = policy.score(rollout, VELOCITY)
    loss, _ = NFT(out, torch.tensor([1.0, 1.0, 1.0, 1.0]), StepBatch())
    loss.sum().backward()
    optimizer.step()
    with torch.no_grad():
        after = -policy.score(rollout).logp
    assert float(after.sum()) < float(before.sum())


def test_eval_rollout_is_the_parent_one_and_tree_with_likelihood_free_is_rejected(sd3_dir):
    policy = _policy(sd3_dir, "elbo")
    rollout = policy.rollout(ROWS[:1], group_size=1, mode="eval")
    assert len(rollout.outputs) == 1 and rollout.info["num_steps"] == 2
    config = FlowPolicyConfig(
        model=str(sd3_dir), tree=TreeRolloutConfig(enabled=True), likelihood_free=LikelihoodFreeConfig(method="nft")
    )
    with pytest.raises(ValueError, match="tree"):
        config.validate()
