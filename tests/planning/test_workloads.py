"""Family facts the plan reads from the configured methods: forwards with gradient per micro-batch (flow) and
noisy copies per sample (diffusion LM), by hand."""

from __future__ import annotations

from genalign.config import load_config
from genalign.planning.dlm_workload import forwards_per_sample
from genalign.planning.flow_workload import steps_with_gradient

FLOW_DEMO, DLM_DEMO = "configs/demo_shapes_flow_grpo.yaml", "configs/demo_arith_dlm_espo.yaml"


def flow(*overrides):
    return load_config(FLOW_DEMO, list(overrides)).policy


def test_flow_forwards_with_gradient_per_micro_batch():
    assert steps_with_gradient(flow(), 8) == 5  # first_fraction 0.5 of 10 steps
    assert steps_with_gradient(flow("policy.train_steps.strategy=all"), 8) == 10
    random = flow(
        "policy.num_steps=16", "policy.train_steps.strategy=random_subset", "policy.train_steps.fraction=0.25"
    )
    assert steps_with_gradient(random, 1) == 4 and steps_with_gradient(random, 8) == 16  # union over the micro-batch
    tree = flow(
        "policy.tree.enabled=true", "policy.tree.split_steps=[0,3]", "policy.tree.branching=2", "algorithm.group_size=4"
    )
    assert steps_with_gradient(tree, 4) == 2  # the split steps
    nft = flow("policy.likelihood_free.method=nft", "policy.likelihood_free.num_timesteps=3")
    assert steps_with_gradient(nft, 4) == 3  # flow-matching points


def test_diffusion_lm_noisy_copies_come_from_the_proxy():
    def copies(*overrides):
        return forwards_per_sample(load_config(DLM_DEMO, list(overrides)).policy)

    assert copies() == 2  # coupled: one complementary pair
    assert copies("policy.likelihood_proxy.num_samples=2") == 4  # {name: coupled, level: sequence, num_samples: 2}
    assert copies("policy.likelihood_proxy=one_step") == 1


def test_rollout_batch_counts_the_samples_a_sample_source_draws():
    from genalign.planning.workload import batch_shape

    plain = load_config("configs/demo_arith_grpo.yaml")
    gfpo = load_config("configs/demo_arith_grpo.yaml", ["algorithm.sample_sources=[gfpo]"])
    assert batch_shape(plain, 1).samples == 32 * 8  # prompts x group_size
    assert batch_shape(gfpo, 1).samples == 32 * 16  # GFPO samples 16 per prompt, trains on the best 8
    assert batch_shape(gfpo, 2).samples == 16 * 16
