"""LaSeR [208] in training (reward shaper ``self_reward_bonus``), hand-computed: the last-token self-rewarding score
``β·(log πθ(z) − c)`` read from the pre-update scoring pass is added to the verifier's reward with a weight, and stands
in for a missing one; the advantage stage hands the shaper's vocabulary term to that pass."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import REWARD_SHAPERS, AdvantageStage, Option, StepBatch
from genalign.experimental.shaping.self_reward import bonus_vocab_term

F64 = torch.float64
HP = {"token_id": 1, "reference_logp": -23.0, "beta": 0.1}
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=F64)
#: log πθ(z) at each action; the rows end at −20, −13 and −18 (the 99 is padding)
VOCAB = torch.tensor([[-30.0, -25.0, -20.0], [-10.0, -13.0, 99.0], [-18.0, 99.0, 99.0]], dtype=F64)


def shape(rewards, **hp):
    batch = StepBatch(mask=MASK, group_ids=torch.zeros(3, dtype=torch.long), vocab_term=VOCAB)
    return REWARD_SHAPERS.get("self_reward_bonus")(torch.tensor(rewards, dtype=F64), batch, **{**HP, **hp})


def test_the_self_reward_at_the_last_action_is_added_with_its_weight():
    shaped, stats = shape([1.0, 0.0, 1.0], weight=0.5)
    # s = 0.1·(−20 + 23) = 0.3, 0.1·(−13 + 23) = 1.0, 0.1·(−18 + 23) = 0.5
    torch.testing.assert_close(shaped, torch.tensor([1.15, 0.5, 1.25], dtype=F64))
    assert stats["reward_shaping/self_reward_mean"] == pytest.approx(0.6)
    # ranked among equals by the score: the two correct samples now differ (0.3 < 0.5)
    assert shaped[0] < shaped[2]


def test_a_missing_verifier_reward_is_filled_by_the_self_reward_unless_asked_not_to():
    shaped, _ = shape([1.0, float("nan"), 0.0], weight=0.0)
    torch.testing.assert_close(shaped, torch.tensor([1.0, 1.0, 0.0], dtype=F64))
    kept, _ = shape([1.0, float("nan"), 0.0], weight=0.0, fill_missing=False)
    assert math.isnan(kept[1])


def test_the_advantage_stage_hands_the_bound_vocabulary_term_to_the_pre_update_pass():
    stage = AdvantageStage.build(
        combiner=Option("weighted_sum"), estimator=Option("grpo"),
        shapers=[Option("self_reward_bonus", {**HP, "weight": 0.5})],
    )  # fmt: skip
    request = stage.prepass()
    assert request is not None and "vocab_term" in request and "vocab_term" in stage.gathered()
    logits = torch.tensor([[0.0, math.log(3.0)]], dtype=F64)
    torch.testing.assert_close(request.param("vocab_term")(logits), torch.tensor([math.log(3 / 4)], dtype=F64))


def test_bad_values_fail_when_the_stage_is_bound():
    with pytest.raises(ValueError, match="weight=-1"):
        AdvantageStage.build(combiner=Option("weighted_sum"), estimator=Option("grpo"),
                             shapers=[Option("self_reward_bonus", {**HP, "weight": -1})])  # fmt: skip
    with pytest.raises(ValueError, match="reference_logp is required"):
        bonus_vocab_term(torch.zeros(1, 2), token_id=1)
    with pytest.raises(ValueError, match="outside the policy's vocabulary"):
        nan_vocab = StepBatch(mask=MASK, group_ids=torch.zeros(3, dtype=torch.long), vocab_term=VOCAB * torch.nan)
        REWARD_SHAPERS.get("self_reward_bonus")(torch.zeros(3, dtype=F64), nan_vocab, **HP)
