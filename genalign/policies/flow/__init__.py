"""Flow-matching policy (SD3 / SD3.5, FLUX.1, Wan2.1) for Flow-GRPO [319], DanceGRPO, MixGRPO, BranchGRPO [170],
TempFlow-GRPO [168], DenseGRPO [148], DiffusionNFT and V-GRPO [10], built by composition (see
:mod:`genalign.policies.flow.policy`).

Modules: ``config`` (the policy section of a config and its capabilities), ``model`` (pipeline, weights, generators,
save/load), ``sampling`` (SDE, tree and likelihood-free strategies on one rollout skeleton), ``scoring`` (SDE step
log-probs; flow-matching ELBO proxy and velocities), ``components`` (parameter averages, prompt cache), ``tree`` (tree
plans and the prefix tree of the leaves), ``dense`` (DenseGRPO step rewards), ``stored`` (what a rollout keeps).
"""

from genalign.policies.flow.config import (
    CONFIG_CLASS,
    KL_ESTIMATORS,
    FlowPolicyConfig,
    LikelihoodFreeConfig,
    TreeRolloutConfig,
    flow_lora,
)


def build_policy(config: FlowPolicyConfig, device="cpu"):
    """:func:`genalign.policies.flow.policy.build_policy` (imported here on first use: reading the family's config
    never imports diffusers)."""
    from genalign.policies.flow.policy import build_policy as build

    return build(config, device)


def __getattr__(name: str):
    if name == "FlowPolicy":
        from genalign.policies.flow.policy import FlowPolicy

        return FlowPolicy
    raise AttributeError(f"module 'genalign.policies.flow' has no attribute {name!r}")


__all__ = [
    "CONFIG_CLASS",
    "KL_ESTIMATORS",
    "FlowPolicy",
    "FlowPolicyConfig",
    "LikelihoodFreeConfig",
    "TreeRolloutConfig",
    "build_policy",
    "flow_lora",
]
