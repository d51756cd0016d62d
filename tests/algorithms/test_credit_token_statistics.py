"""Group token-statistics credit rules against hand values: GTPO conflict tokens [138], KTAE key tokens [158],
TW-GRPO intra-group variance weights [156], LESS low-entropy segments [195]; config acceptance on the arith-lm LM."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.algorithms.credit.token_statistics import fisher_exact_p, low_entropy_runs
from genalign.config import from_dict
from genalign.config.schema import TrainConfig

F64 = torch.float64


def apply(name: str, adv, ids, mask=None, entropy=None, logp=None, **hp) -> torch.Tensor:
    adv = torch.tensor(adv, dtype=F64)
    ids = torch.tensor(ids)
    mask = torch.ones(ids.shape) if mask is None else torch.tensor(mask, dtype=torch.float32)
    inputs = StepBatch(sample_advantages=adv, mask=mask, group_ids=torch.zeros(len(adv), dtype=torch.long), entropy=None if entropy is None else torch.tensor(entropy, dtype=F64), behaviour_logp=None if logp is None else torch.tensor(logp, dtype=F64), action_ids=ids)  # fmt: skip
    return CREDIT_RULES.get(name)(adv[:, None].expand(ids.shape).clone(), inputs, **hp)


# ---- GTPO ------------------------------------------------------------------------------------------------------------
IDS = [[5, 6, 7, 9], [5, 6, 8, 9], [5, 1, 2, 3]]  # positive, negative, zero advantage
LOW = [[0.1] * 4] * 3


def test_conflict_tokens_protect_shared_leading_and_trailing_runs():
    # from the start, tokens 5, 6 sit at positions 0, 1 of a positive and a negative completion (position 2 differs);
    # right-aligned from the end, token 9 is shared. Positive: W = 2 on each conflict (per direction), negative: 0.
    # Weights: positive [2, 2, 1, 2], negative [0, 0, 1, 0]; three conflict tokens each -> divided by 3.
    out = apply("conflict_tokens", [1.0, -1.0, 0.0], IDS, entropy=LOW, entropy_coef=0.0)
    expected = torch.tensor([[2 / 3, 2 / 3, 1 / 3, 2 / 3], [0, 0, -1 / 3, 0], [0, 0, 0, 0]], dtype=F64)
    torch.testing.assert_close(out, expected)
    # every start-aligned conflict (positions 0, 1, 3), no per-completion scaling
    every = apply("conflict_tokens", [1.0, -1.0, 0.0], IDS, entropy=LOW, entropy_coef=0.0, positions="all",
                  scale_by_conflicts=False)  # fmt: skip
    torch.testing.assert_close(every[:2], torch.tensor([[2.0, 2, 1, 2], [0, 0, -1, 0]], dtype=F64))


def test_conflict_tokens_entropy_filter_and_penalty():
    # mean entropies: 0.5 (kept, advantage 1 - 0.1·0.5 = 0.95), 1.0 (> 0.7: dropped), 0.2 (0 - 0.02 = -0.02)
    entropy = [[0.5] * 4, [1.0] * 4, [0.2] * 4]
    out = apply("conflict_tokens", [1.0, -1.0, 0.0], IDS, entropy=entropy)
    torch.testing.assert_close(out[0], torch.tensor([2, 2, 1, 2], dtype=F64) * 0.95 / 3)
    torch.testing.assert_close(out[1], torch.zeros(4, dtype=F64))
    torch.testing.assert_close(out[2], torch.full((4,), -0.02, dtype=F64))


# ---- KTAE ------------------------------------------------------------------------------------------------------------
KT_IDS = [[1, 2], [1, 2], [3, 2], [3, 2]]  # two correct responses with token 1, two wrong ones with token 3


def test_fisher_exact_p_by_hand():
    # [[2, 0], [0, 2]]: margins 2/2 of 4, P(k) = C(2,k)C(2,2-k)/C(4,2) = 1/6, 4/6, 1/6 -> p = 1/6 + 1/6
    p = fisher_exact_p(*(torch.tensor([x], dtype=F64) for x in (2.0, 0.0, 0.0, 2.0)))
    assert p.item() == pytest.approx(1 / 3)
    # [[3, 1], [1, 3]]: P(k) for k = 0..4 = 1, 16, 36, 16, 1 (/70); observed k = 3 -> p = (1 + 16 + 16 + 1) / 70
    p = fisher_exact_p(*(torch.tensor([x], dtype=F64) for x in (3.0, 1.0, 1.0, 3.0)))
    assert p.item() == pytest.approx(34 / 70)


def test_key_tokens_add_the_signed_association_score():
    # token 1: table [[2, 0], [0, 2]] -> Fisher p = 1/3, e^{-2/3}; IG = 1 bit; Cohen h = asin(1) - asin(0) = π/2
    # token 2 (in every response): p = 1 -> 0, IG = 0, h = 0 -> score 0; token 3 mirrors token 1 (h = -π/2)
    # without the term-frequency part (γ = 0): score_1 = (e^{-2/3} + 1)·(π/2) / 2, weight = 2(σ(score) - 1/2)
    score = (math.exp(-2 / 3) + 1.0) * (math.pi / 2) / 2
    weight = 2 * (1 / (1 + math.exp(-score)) - 0.5)
    out = apply("key_tokens", [1.0, 1.0, -1.0, -1.0], KT_IDS, gamma=0.0)
    expected = torch.tensor([[1 + weight, 1], [1 + weight, 1], [-1 - weight, -1], [-1 - weight, -1]], dtype=F64)
    torch.testing.assert_close(out, expected)
    # with the BM25 part (γ = 1): token 1 never occurs in wrong responses, tf_c / (0 + 1e-5) = 0.6 / 1e-5 saturates
    # the sigmoid -> +1; token 3 -> -1; token 2 has equal frequencies -> 0 (the implementation's behaviour)
    out = apply("key_tokens", [1.0, 1.0, -1.0, -1.0], KT_IDS)
    torch.testing.assert_close(out, torch.tensor([[2.0, 1], [2, 1], [-2, -1], [-2, -1]], dtype=F64))


def test_key_tokens_leave_groups_without_both_outcomes_alone():
    out = apply("key_tokens", [0.0, 0.0, 0.0, 0.0], KT_IDS)
    torch.testing.assert_close(out, torch.zeros(4, 2, dtype=F64))


# ---- TW-GRPO ---------------------------------------------------------------------------------------------------------
def test_intra_group_variance_weights_by_hand():
    # position 0: log-probs -1, -1, -1 (variance 0); position 1: -1, -2, -3 (population variance 2/3);
    # position 2: -1, -3 and a padded third response (variance 1). Min-max: 0, 2/3, 1 -> w = 1 + 0.4·(0, 2/3, 1)
    logp = [[-1.0, -1.0, -1.0], [-1.0, -2.0, -3.0], [-1.0, -3.0, -9.0]]
    mask = [[1, 1, 1], [1, 1, 1], [1, 1, 0]]
    out = apply("intra_group_variance", [1.0, 1.0, 1.0], [[0] * 3] * 3, mask=mask, logp=logp)
    w = torch.tensor([1.0, 1 + 0.4 * 2 / 3, 1.4], dtype=F64)
    torch.testing.assert_close(out, torch.stack([w, w, torch.tensor([1.0, 1 + 0.4 * 2 / 3, 1.0], dtype=F64)]))


# ---- LESS ------------------------------------------------------------------------------------------------------------
def test_low_entropy_runs():
    assert low_entropy_runs(torch.tensor([True, True, False, True, True, True]), 2) == [(0, 2), (3, 6)]
    assert low_entropy_runs(torch.tensor([True, False, True]), 2) == []


def test_low_entropy_segments_amplify_unique_and_neutralise_shared():
    ids = [[1, 2, 3, 4, 5], [1, 2, 3, 7, 8], [9, 4, 5, 6, 6]]
    entropy = [[0.0, 0, 0, 5, 0], [5.0, 0, 0, 0, 0], [0.0, 0, 0, 5, 5]]  # low-entropy runs (>= 2 tokens):
    # correct 0: (1, 2, 3) also in the incorrect response -> shared -> 0; its run (5,) is too short
    # incorrect 1: (2, 3, 7, 8) in no correct response -> unique -> blame x1.5
    # correct 2: (9, 4, 5) in no incorrect response -> unique -> x1.5
    out = apply("low_entropy_segments", [1.0, -1.0, 1.0], ids, entropy=entropy, entropy_threshold=1.0, min_length=2)
    expected = torch.tensor([[0.0, 0, 0, 1, 1], [-1.0, -1.5, -1.5, -1.5, -1.5], [1.5, 1.5, 1.5, 1, 1]], dtype=F64)
    torch.testing.assert_close(out, expected)


# ---- config ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rule", ["conflict_tokens", "key_tokens", "intra_group_variance", "low_entropy_segments"])
def test_a_causal_lm_config_accepts_the_rule(rule):
    config = from_dict(
        TrainConfig,
        {
            "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "use_chat_template": False},
            "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8}}},
            "rewards": [{"fn": "exact_match"}],
            "algorithm": {"group_size": 4, "prompts_per_step": 2, "credit": [rule]},
        },
    )
    assert [r.name for r in config.algorithm.credit] == [rule]
