"""Tree rollouts of the flow policy on a tiny SD3: leaves equal independent rollouts, ODE edges get no gradient,
exact old log-probs, NFE per leaf reported, per-depth advantages through the trainer hook."""

import os

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.pipelines.flow import denoise
from genalign.pipelines.flow_tree import denoise_tree
from genalign.policies.flow import FlowPolicyConfig, TreeRolloutConfig, build_policy, flow_lora
from genalign.schedulers.branching import TreePlan

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROWS = [{"prompt": "two red circles"}, {"prompt": "a blue square"}]


@pytest.fixture(scope="module")
def sd3_dir(tmp_path_factory):
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    torch.set_num_threads(1)
    return save_tiny_pipeline("sd3", tmp_path_factory.mktemp("tiny_tree_sd3") / "sd3")


def _config(model_dir, **overrides) -> FlowPolicyConfig:
    values = dict(
        model=str(model_dir),
        height=16,
        width=16,
        num_steps=4,
        eval_num_steps=3,
        guidance_scale=3.0,
        max_sequence_length=8,
        lora=flow_lora(rank=4, alpha=4.0),
        tree=TreeRolloutConfig(enabled=True, split_steps=[0, 2], branching=2),
    )
    return FlowPolicyConfig(**(values | overrides))


def test_every_leaf_equals_an_independent_rollout_given_the_same_noises(sd3_dir):
    policy = build_policy(_config(sd3_dir))
    sampler = policy.model.sampler
    plan = TreePlan(num_steps=4, split_steps=(0, 2), branching=2, sde_steps=(3,))
    cond, uncond = policy.model.embeddings([row["prompt"] for row in ROWS])
    generator = torch.Generator().manual_seed(3)
    roots = sampler.prepare(2, height=16, width=16, num_frames=1, num_inference_steps=4, generator=generator)
    tree = denoise_tree(
        sampler.arch, policy.model.transformer, sampler.scheduler, roots, cond, uncond,
        plan=plan, guidance_scale=3.0, noise_level=0.7, generator=generator, record_latents=True, record_noises=True,
    )  # fmt: skip
    leaves = plan.num_leaves
    assert tree.latents.shape[:2] == (2 * leaves, 5) and tree.noises.shape[:2] == (2 * leaves, 4)
    assert tree.network_evaluations == 2 * (1 + 2 + 2 + 4)
    # the shared prefix really is shared: leaves of one tree start from the same noise and agree until the first split
    assert torch.equal(tree.latents[0, 0], tree.latents[3, 0])
    assert torch.equal(tree.latents[0, 1], tree.latents[1, 1])  # leaves 0 and 1 share the first child
    assert not torch.equal(tree.latents[0, 1], tree.latents[2, 1])  # split at step 0: the two children differ
    repeat = {k: v.repeat_interleave(leaves, 0) for k, v in cond.items()}
    repeat_u = {k: v.repeat_interleave(leaves, 0) for k, v in uncond.items()}
    independent = denoise(
        sampler.arch, policy.model.transformer, sampler.scheduler, roots.repeat_interleave(leaves, 0), repeat, repeat_u,
        guidance_scale=3.0, sde_mask=plan.stochastic_steps().expand(2 * leaves, 4), noise_level=0.7, generator=None,
        record_latents=True, noises=tree.noises,
    )  # fmt: skip
    assert torch.allclose(tree.latents, independent.latents, atol=1e-5, rtol=1e-5)
    assert torch.allclose(tree.log_probs, independent.log_probs, atol=1e-5, rtol=1e-5)
    assert torch.equal(tree.stochastic, independent.stochastic)
    assert tree.stochastic[0].tolist() == [True, False, True, True]


def test_tree_rollout_reports_nfe_scores_exactly_and_ode_edges_get_no_gradient(sd3_dir):
    policy = build_policy(_config(sd3_dir))
    rollout = policy.rollout(ROWS, group_size=4)
    assert len(rollout) == 8 and rollout.group_ids.tolist() == [0] * 4 + [1] * 4
    assert rollout.action_mask[0].tolist() == [1.0, 0.0, 1.0, 0.0]  # splits trained, ODE edges are no actions
    assert rollout.info["nfe_per_sample"] == pytest.approx(2 * (1 + 2 + 2 + 4) / 4)  # CFG: two passes
    assert rollout.info["nfe_per_sample_independent"] == 2 * 4

    calls = []
    handle = policy.model.transformer.register_forward_hook(lambda *_: calls.append(1))
    policy.model.transformer.train()
    scored = policy.score(rollout)
    handle.remove()
    assert len(calls) == 2 * 2  # only the two split steps run the transformer (cond + detached uncond)
    assert torch.allclose(scored.logp.detach(), rollout.old_logp, atol=1e-5)  # first ratio ~1 (batching differs)
    params = policy.trainable_parameters()
    for step, trained in enumerate([True, False, True, False]):
        grads = torch.autograd.grad(scored.logp[:, step].sum(), params, retain_graph=True, allow_unused=True)
        total = sum(float(g.abs().sum()) for g in grads if g is not None)
        assert (total > 0) == trained, f"step {step}: gradient {total}"


def test_the_declared_prefix_tree_gives_per_depth_credit(sd3_dir):
    policy = build_policy(_config(sd3_dir))
    rollout = policy.rollout(ROWS, group_size=4)
    tree = rollout.structure.get("prefix_tree")
    # leaves 0-3 of tree 0: step 0 splits into {0, 1} | {2, 3}; step 1 is ODE (same nodes); step 2 splits again
    assert tree.depth[0].tolist() == [1, 1, 2, 2]
    assert tree.node_of_action[0, 0] == tree.node_of_action[1, 0] != tree.node_of_action[2, 0]
    assert tree.node_of_action[0, 2] != tree.node_of_action[1, 2]
    assert len(set(tree.node_of_action[:4].flatten().tolist()) & set(tree.node_of_action[4:].flatten().tolist())) == 0
    leaf_values = torch.tensor([1.0, 3.0, 2.0, 6.0, 0.0, 0.0, 1.0, 1.0])
    inputs = StepBatch(
        sample_advantages=leaf_values, mask=rollout.action_mask, group_ids=rollout.group_ids, **rollout.structure
    )
    steps = CREDIT_RULES.get("tree")(torch.zeros(8, 4), inputs)
    # tree 0, depth 1: nodes {1, 3} -> 2, {2, 6} -> 4: -1, +1 (population std 1); depth 2: pairs (1, 3) and (2, 6)
    # are normalised together over the 4 leaves: mean 3, std sqrt(3.5)
    depth2 = (torch.tensor([1.0, 3.0, 2.0, 6.0]) - 3.0) / (3.5**0.5 + 1e-4)
    torch.testing.assert_close(steps[:4, 0], torch.tensor([-1.0, -1.0, 1.0, 1.0]) / (1 + 1e-4))
    torch.testing.assert_close(steps[:4, 2], depth2)
    assert torch.equal(steps[:4, 1], steps[:4, 0])  # the ODE step continues the depth-1 node
    # tree 1: depth 1 nodes {0, 0} -> 0 and {1, 1} -> 1
    torch.testing.assert_close(steps[4:, 0], torch.tensor([-0.5, -0.5, 0.5, 0.5]) / (0.5 + 1e-4))


def test_depth_pruning_sliding_splits_and_group_size_check(sd3_dir):
    tree = TreeRolloutConfig(enabled=True, split_steps=[0, 1], branching=2, trained_depths=[2], slide_every=1)
    policy = build_policy(_config(sd3_dir, tree=tree))
    policy.on_step(2)  # splits moved two steps later: (2, 3)
    rollout = policy.rollout(ROWS[:1], group_size=4)
    assert rollout.action_mask[0].tolist() == [0.0, 0.0, 0.0, 1.0]  # only depth 2 (the split at step 3) trained
    inputs = StepBatch(
        sample_advantages=torch.ones(4), mask=rollout.action_mask, group_ids=rollout.group_ids, **rollout.structure
    )
    weights = CREDIT_RULES.get("noise_aware_steps")(torch.ones(4, 4), inputs)
    assert torch.allclose(weights, rollout.action_mask)  # one trained step: weight 1
    with pytest.raises(ValueError, match="group_size"):
        policy.rollout(ROWS[:1], group_size=3)
    with pytest.raises(ValueError, match="split_steps"):
        _config(sd3_dir, tree=TreeRolloutConfig(enabled=True, split_steps=[4])).validate()
