"""MicroCoder-GRPO's diversity-determined temperature [125] (``diversity_temperature``): the rung moves against the
groups' distinct-2-gram ratio, every prompt of the next step carries the rung's temperature, the rung is checkpointed."""

from __future__ import annotations

import pytest
import torch

from genalign.experimental.sampling.temperature import DiversityTemperature
from genalign.policies.base import GUIDANCE_KEY
from genalign.sampling import Candidate, Outcome


def tokens_outcome(groups: list[list[list[int]]]) -> Outcome:
    """An outcome whose group ``g`` holds the completions ``groups[g]`` (token ids, right-padded with 0)."""
    completions = [c for group in groups for c in group]
    width = max(len(c) for c in completions)
    tokens = torch.tensor([c + [0] * (width - len(c)) for c in completions])
    n = len(completions)
    return Outcome(
        positions=torch.tensor([g for g, group in enumerate(groups) for _ in group]),
        indices=torch.zeros(n, dtype=torch.long),
        rewards=torch.zeros(n, dtype=torch.float64),
        lengths=torch.tensor([float(len(c)) for c in completions], dtype=torch.float64),
        truncated=None,
        progress=0.0,
        tokens=tokens,
        behaviour_logp=torch.zeros(tokens.shape),
    )


REPEATED = [[[1, 2, 3], [1, 2, 3]], [[4, 5], [4, 5]]]  # 2-grams: {12, 23} of 4 -> 0.5; {45} of 2 -> 0.5
SCATTERED = [[[1, 2, 3], [4, 5, 6]], [[7, 8], [9, 1]]]  # every 2-gram distinct -> 1.0


def test_the_rung_moves_against_the_groups_diversity():
    rule = DiversityTemperature(temperatures=(0.6, 0.8, 1.0, 1.2), start=0.8, low=0.6, high=0.9)
    decision = rule.after_rewards(tokens_outcome(REPEATED))  # d = 0.5 < 0.6: hotter
    assert decision.stats == {"diversity": 0.5, "sampled_at": 0.8, "next_temperature": 1.0}
    rule.after_rewards(tokens_outcome(REPEATED))
    rule.after_rewards(tokens_outcome(REPEATED))  # already at the top rung: stays
    assert rule.temperature == 1.2
    assert rule.after_rewards(tokens_outcome(SCATTERED)).stats["diversity"] == 1.0  # > 0.9: cooler
    assert rule.temperature == 1.0
    mixed = [REPEATED[0], SCATTERED[1]]  # (0.5 + 1.0) / 2 = 0.75, inside the band: unchanged
    assert rule.after_rewards(tokens_outcome(mixed)).stats["next_temperature"] == 1.0


def test_every_prompt_carries_the_rung_and_keeps_earlier_guidance():
    rule = DiversityTemperature(start=1.2)
    pool = [Candidate(0, 3, {"prompt": "a"}), Candidate(1, 4, {"prompt": "b", GUIDANCE_KEY: {"hint": "h"}})]
    chosen = rule.choose(pool, 2, torch.Generator())
    assert [c.row[GUIDANCE_KEY] for c in chosen] == [{"temperature": 1.2}, {"hint": "h", "temperature": 1.2}]
    assert GUIDANCE_KEY not in pool[0].row  # the data row itself is not changed


def test_the_rung_survives_a_checkpoint_and_bad_settings_are_named():
    rule = DiversityTemperature(low=0.6)
    rule.after_rewards(tokens_outcome(REPEATED))  # 0.5 < 0.6: from 1.0 to 1.2
    restored = DiversityTemperature(low=0.6)
    restored.load_state_dict(rule.state_dict())
    assert restored.temperature == rule.temperature == 1.2
    with pytest.raises(ValueError, match=r"start = 0.9 must be one of temperatures"):
        DiversityTemperature(start=0.9)
    with pytest.raises(ValueError, match="strictly increasing"):
        DiversityTemperature(temperatures=(1.0, 0.8))
    with pytest.raises(ValueError, match="diversity band"):
        DiversityTemperature(low=0.8, high=0.4)
