"""DRPO [25] (reward combiner ``domain_scaled``), hand-computed: group-normalised rewards scaled by the rarity of the
prompt's domain (counted over the run) and by the difficulty cluster of the prompt within its domain."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import REWARD_COMBINERS, bind_option
from genalign.experimental.combiners.domains import kmeans_1d

F64 = torch.float64
#: column 0: accuracy; column 1: the domain label (a row_label reward). Group 0 is domain 0; groups 1 and 2 domain 1
REWARDS = torch.tensor([[1, 0], [0, 0], [1, 1], [1, 1], [0, 1], [1, 1]], dtype=F64)
GROUPS = torch.tensor([0, 0, 1, 1, 2, 2])
Z = 1 / math.sqrt(2)  # the GRPO advantage of rewards [1, 0] (unbiased std)


def combine(rewards=REWARDS, groups=GROUPS, **hp):
    return REWARD_COMBINERS.get("domain_scaled")(rewards, groups, torch.ones(rewards.shape[1], dtype=F64), **hp)


def test_rare_domains_and_hard_clusters_weigh_more():
    combined, stats = combine(domain_column=1, eps=0.0)
    # rarity: n = 1 (domain 0) and 2 (domain 1), ω ∝ 1/n with mean 1 over the 3 groups: ω = 3/2, 3/4
    # difficulty in domain 1: group means 1 (group 1) and ½ (group 2), two clusters, κ ∝ e^{−μ} with mean 1:
    # κ_hard = 2/(1 + e^{−½}), κ_easy = κ_hard·e^{−½}; group 1 is constant (advantage 0)
    hard = 2 / (1 + math.exp(-0.5))
    expected = [1.5 * Z, -1.5 * Z, 0.0, 0.0, -0.75 * hard * Z, 0.75 * hard * Z]
    torch.testing.assert_close(combined, torch.tensor(expected, dtype=F64))
    assert stats["domain_scaled/domains"] == 2
    assert stats["domain_scaled/weight_max"] == pytest.approx(1.5) and stats[
        "domain_scaled/weight_min"
    ] == pytest.approx(0.75 * hard * math.exp(-0.5))
    # the label column is not part of the reward: without scaling (equal domains, one cluster) this is plain GRPO
    flat, _ = combine(domain_column=1, rarity_temperature=1e9, difficulty_clusters=1, eps=0.0)
    torch.testing.assert_close(flat, torch.tensor([Z, -Z, 0.0, 0.0, -Z, Z], dtype=F64), atol=1e-7, rtol=0)


def test_rarity_is_counted_over_the_run():
    bound = bind_option(REWARD_COMBINERS, "domain_scaled", {"domain_column": 1, "difficulty_clusters": 1, "eps": 0.0})
    bound.update(REWARDS, GROUPS)  # one prompt of domain 0, two of domain 1 seen
    later = torch.tensor([[1, 0], [0, 0], [1, 1], [0, 1]], dtype=F64)  # one group of each domain
    combined, _ = bound(later, torch.tensor([0, 0, 1, 1]), torch.ones(2, dtype=F64))
    # counts with this batch: 2 and 3 -> ω ∝ 1/2, 1/3 with mean 1 over the two groups: 6/5, 4/5
    torch.testing.assert_close(combined, torch.tensor([1.2 * Z, -1.2 * Z, 0.8 * Z, -0.8 * Z], dtype=F64))
    fresh, _ = combine(later, torch.tensor([0, 0, 1, 1]), domain_column=1, difficulty_clusters=1, eps=0.0)
    torch.testing.assert_close(fresh, torch.tensor([Z, -Z, Z, -Z], dtype=F64))  # one batch alone: equal counts
    restored = bind_option(REWARD_COMBINERS, "domain_scaled", {"domain_column": 1})
    restored.load_state_dict(bound.state_dict())
    assert restored.counts == {0.0: 1.0, 1.0: 2.0}


def test_kmeans_clusters_are_numbered_by_centre():
    values = torch.tensor([0.9, 0.1, 0.5, 0.95, 0.15], dtype=F64)
    # centres start at the ¼ and ¾ quantiles (0.15, 0.9); 0.5 is nearer 0.15; the centres move to 0.25 and 0.925
    assert kmeans_1d(values, 2).tolist() == [1, 0, 0, 1, 0]
    assert kmeans_1d(values, 1).tolist() == [0] * 5
    assert kmeans_1d(values[:1], 3).tolist() == [0]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="domain_column=2 is not one of the 2 rewards"):
        combine(domain_column=2)
    with pytest.raises(ValueError, match="rarity_temperature > 0"):
        combine(rarity_temperature=0.0)
