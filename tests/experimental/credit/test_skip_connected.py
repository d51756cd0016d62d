"""SKPO [66] (credit rule ``skip_connected``), by hand on a two-stage tree: two upstream segments of a prompt, two
downstream completions each. Upstream tokens get the normalised mean outcome of their downstream completions,
downstream tokens their advantage among the completions of the same upstream."""

from __future__ import annotations

import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.algorithms.structure import PrefixTree

#: leaves 0, 1 below upstream node 10, leaves 2, 3 below upstream node 11; actions 0-1 upstream, 2-3 downstream
NODES = torch.tensor([[10, 10, 20, 20], [10, 10, 21, 21], [11, 11, 22, 22], [11, 11, 23, 23]])
DEPTH = torch.tensor([[0, 0, 1, 1]] * 4)
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])


def credit(outcomes, rule="skip_connected"):
    batch = StepBatch(mask=MASK, group_ids=torch.zeros(4, dtype=torch.long), prefix_tree=PrefixTree(NODES, DEPTH),
                      sample_advantages=torch.tensor(outcomes))  # fmt: skip
    return CREDIT_RULES.get(rule)(torch.full((4, 4), 7.0), batch)


def test_upstream_gets_its_downstream_mean_and_downstream_its_sibling_advantage():
    got = credit([1.0, 0.0, 0.0, 0.0])
    # upstream values: V(10) = 0.5, V(11) = 0 → over the two upstreams: mean 0.25, std 0.25 → ±1
    # downstream: leaves 0, 1 differ (mean 0.5, std 0.5 → ±1); leaves 2, 3 agree → 0
    expected = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, -1.0, 0.0], [-1.0, -1.0, 0.0, 0.0],
                             [-1.0, -1.0, 0.0, 0.0]])  # fmt: skip
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_the_downstream_group_is_the_siblings_not_the_whole_prompt():
    got = credit([1.0, 1.0, 0.0, 1.0])
    # leaves 0 and 1 agree: 0 among their siblings, although both beat the prompt's mean (GRPO-MA keeps that level)
    assert torch.equal(got[0, 2:], torch.zeros(2)) and got[3, 2] > 0.99 and got[2, 2] < -0.99
    ma = credit([1.0, 1.0, 0.0, 1.0], rule="grpo_ma")
    assert torch.equal(ma[0, 2:], torch.full((2,), 7.0))  # grpo_ma keeps the incoming downstream advantage
