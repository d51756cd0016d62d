"""TDPO [48] in its published form (``tdpo_exact``) against hand-computed values: the pair margin corrected by the
difference of the samples' sequential forward KL, summed from the exact per-token KL (score feature
``ref_forward_kl``, with gradient) over the valid actions; TDPO2 holds the chosen sample's KL constant."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import OBJECTIVES, ScoreOutput, StepBatch
from tests.algorithms.test_objectives_preference import aggregated, close, sigmoid, softplus


def tdpo_exact(kl, **hp):
    logp = torch.tensor([[-1.0, -1.0], [-3.0, 0.0]], dtype=torch.float64, requires_grad=True)
    kl = torch.tensor(kl, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    batch = StepBatch(mask=mask, group_ids=torch.tensor([0, 0]), combined_reward=torch.tensor([1.0, 0.0]),
                      ref_logp=torch.tensor([[-1.5, -1.5], [-1.0, 5.0]], dtype=torch.float64))  # fmt: skip
    score = ScoreOutput(logp=logp, features={"ref_forward_kl": kl})
    loss, metrics = OBJECTIVES.get("tdpo_exact")(score, torch.zeros(2), batch, **hp)
    return logp, kl, mask, loss, metrics


@pytest.mark.parametrize("variant", [1, 2])
def test_the_margin_is_corrected_by_the_exact_sequential_kl(variant):
    # h_w = 0.5 + 0.5 = 1, h_l = −2 (the padded action does not count); δ_w = 0.1 + 0.3, δ_l = 0.7 (0.9 is padding)
    logp, kl, mask, loss, metrics = tdpo_exact([[0.1, 0.3], [0.7, 0.9]], beta=0.5, alpha=0.5, variant=variant)
    weight = 1.0 if variant == 1 else 0.5
    z = 0.5 * (3.0 - weight * (0.7 - 0.4))
    close(aggregated(loss, mask), softplus(-z))
    close(metrics["tdpo/divergence"], (0.4 + 0.7) / 2)
    aggregated(loss, mask).backward()
    g = -sigmoid(-z) * 0.5
    close(kl.grad, [[g * (1.0 if variant == 1 else 0.0)] * 2, [-g * weight, 0.0]])  # TDPO2: sg(δ_w)
    close(logp.grad, [[g, g], [-g, 0.0]])


def test_bad_values_are_refused():
    with pytest.raises(ValueError, match=r"variant=3 must be 1 or 2"):
        tdpo_exact([[0.0, 0.0], [0.0, 0.0]], variant=3)
