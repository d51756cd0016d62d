"""The toy policy family of the trainer tests, plus truncation flags: a completion ending in 'd' counts as cut off by
the length limit. Registered as family ``toy_truncating`` (for the overlong-filtering tests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from genalign.policies import family_names, register_family
from genalign.policies.base import PolicyCapabilities, RolloutRequest
from tests.trainer import toy_policy
from tests.trainer.toy_policy import ToyPolicy, ToyPolicyConfig

if "toy" not in family_names():  # registered, never added to the built-in FAMILY_MODULES
    register_family("toy", config_class=ToyPolicyConfig, build_policy=toy_policy.build_policy)


@dataclass
class TruncatingToyConfig(ToyPolicyConfig):
    family: Literal["toy_truncating"] = "toy_truncating"

    def capabilities(self) -> PolicyCapabilities:
        return PolicyCapabilities(rollout_logp_is_exact=True, signals=frozenset({"entropy", "kl", "truncated"}))


class TruncatingToyPolicy(ToyPolicy):
    family = "toy_truncating"

    def rollout(self, rows, group_size, *, mode="train", request=RolloutRequest()):
        rollout = super().rollout(rows, group_size, mode=mode, request=request)
        rollout.structure = dict(truncated=torch.tensor([o.endswith("d") for o in rollout.outputs]))
        return rollout


def build_policy(config: TruncatingToyConfig, device: torch.device) -> TruncatingToyPolicy:
    policy = TruncatingToyPolicy(config)
    policy.table.to(device)
    return policy


if "toy_truncating" not in family_names():
    register_family("toy_truncating", config_class=TruncatingToyConfig, build_policy=build_policy)
