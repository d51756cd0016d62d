"""PPPO [215] (``progressive_prefix``): the retained prefix grows with training progress, counted in valid tokens of
each response; accepted by the config loader."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from tests.algorithms.arith_config import arith_lm_config

MASK = torch.tensor([[1.0] * 10, [1.0] * 4 + [0.0] * 6, [0.0, 0.0] + [1.0] * 8])  # row 2 is left-padded


def kept(progress: float, mask=MASK, **hp) -> list[int]:
    inputs = StepBatch(
        sample_advantages=torch.ones(3), mask=mask, group_ids=torch.zeros(3, dtype=torch.long), progress=progress
    )
    out = CREDIT_RULES.get("progressive_prefix")(torch.ones(mask.shape), inputs, **hp)
    assert torch.equal(out, out * (mask > 0))  # never on padding
    return out.sum(1).long().tolist()


def test_retained_prefix_grows_linearly_from_start_to_end_fraction():
    # r = 0.1 at the start: ⌈0.1·10⌉ = 1 (exactly 1: no float spill to 2), ⌈0.1·4⌉ = 1, ⌈0.1·8⌉ = 1
    assert kept(0.0) == [1, 1, 1]
    # r = 0.3 halfway: ⌈3⌉ = 3, ⌈1.2⌉ = 2, ⌈2.4⌉ = 3
    assert kept(0.5) == [3, 2, 3]
    # r = 0.5 at the end: 5, 2, 4
    assert kept(1.0) == [5, 2, 4]
    assert kept(1.0, start_fraction=1.0, end_fraction=1.0) == [10, 4, 8]  # all tokens: GRPO
    assert kept(0.0, min_tokens=2) == [2, 2, 2]


def test_the_prefix_is_the_first_valid_tokens():
    inputs = StepBatch(
        sample_advantages=torch.ones(3), mask=MASK, group_ids=torch.zeros(3, dtype=torch.long), progress=1.0
    )
    out = CREDIT_RULES.get("progressive_prefix")(torch.ones(3, 10), inputs)
    assert out[2].tolist() == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]  # after the left padding


def test_needs_progress_and_valid_fractions():
    with pytest.raises(ValueError, match="progress"):
        CREDIT_RULES.get("progressive_prefix")(
            torch.ones(3, 10), StepBatch(sample_advantages=torch.ones(3), mask=MASK, group_ids=torch.zeros(3).long())
        )
    with pytest.raises(ValueError, match="start_fraction"):
        kept(0.5, start_fraction=0.6, end_fraction=0.5)


def test_config_accepts_pppo_on_the_causal_lm():
    arith_lm_config(credit=[{"name": "progressive_prefix", "end_fraction": 0.6}])


def test_continuation_accumulated_reward_is_grpo_ma_on_the_retained_prefix():
    """PPPO's two parts as the recipe composes them: each prefix (the thought before the tree's split) sampled with
    two continuations gets the mean outcome of its continuations, normalised over the group's prefixes (``grpo_ma``),
    and ``progressive_prefix`` then keeps only the retained prefix in the loss."""
    from tests.experimental.credit.test_tree_groups import SQRT2, thoughts_and_answers

    tree, mask, groups = thoughts_and_answers()
    adv = torch.tensor([1.0, 0.0, -1.0, -1.0, 2.0, 0.0, 1.0, 1.0, 0.0, 0.0, 5.0, 5.0, 1.0, 3.0])
    inputs = StepBatch(sample_advantages=adv, mask=mask, group_ids=groups, prefix_tree=tree, progress=1.0)
    accumulated = CREDIT_RULES.get("grpo_ma")(adv[:, None].expand(14, 3).clone(), inputs)
    out = CREDIT_RULES.get("progressive_prefix")(accumulated, inputs, start_fraction=0.6, end_fraction=0.6)
    # ⌈0.6·3⌉ = 2 retained tokens = the thought; group 0's thoughts: V = 0.5, −1 -> ±1 (test_tree_groups)
    prefix = torch.tensor([1.0, 1.0, -1.0, -1.0] + [1 / SQRT2] * 4 + [-SQRT2] * 2)
    torch.testing.assert_close(out[:10, :2], prefix[:, None].expand(10, 2), atol=1e-5, rtol=0)
    assert out[:10, 2].abs().sum() == 0  # the continuations are not trained
    assert out[10:12].tolist() == [[5.0, 0.0, 0.0]] * 2  # ended before the split: its own first token only


def test_config_accepts_the_pppo_recipe_with_tree_rollouts():
    config = arith_lm_config(credit=["grpo_ma", "progressive_prefix"])
    assert config.algorithm.needs()["prefix_tree"]
