"""Response-level credit and entropy regularisers of issue 17, hand-computed: AEM [231] (advantages rescaled by
relative confidence), G²RPO's length shaping [65] and entropy band [65], entropy minimisation [42] (EM-RL reward and
EM-FT loss)."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, REGULARIZERS, StepBatch, apply_credit
from genalign.algorithms.regularizers import entropy_from_logits
from tests.algorithms.regularizer_inputs import regularizer_inputs

F64 = torch.float64


def t(values):
    return torch.tensor(values, dtype=F64)


def close(actual, expected, tol=1e-9):
    torch.testing.assert_close(actual, t(expected), rtol=0, atol=tol)


# --------------------------------------------------------------------------------------------------------------- AEM
def test_aem_weights_each_response_by_its_relative_confidence():
    # surprisal u = (0.5, 1.5) (mean token NLL), ū = 1: w = (ū/u) = (2, 2/3); group 1: u = (1, 1) -> w = 1
    inputs = StepBatch(
        sample_advantages=t([1.0, -1.0, 0.5, -0.5]),
        mask=t([[1, 1], [1, 1], [1, 0], [1, 1]]),
        group_ids=torch.tensor([0, 0, 1, 1]),
        behaviour_logp=t([[-0.5, -0.5], [-1.0, -2.0], [-1.0, -9.0], [-1.0, -1.0]]),
    )
    out = apply_credit([("aem", {"weight_max": 3.0})], inputs["sample_advantages"], inputs)
    close(out, [[2.0, 2.0], [-2 / 3, -2 / 3], [0.5, 0.5], [-0.5, -0.5]])
    # positives: confident ones weigh more (entropy falls); negatives: confident mistakes weigh more (entropy rises)
    clamped = apply_credit([("aem", {})], inputs["sample_advantages"], inputs)  # default clamp [0.5, 2]
    close(clamped[:2], [[2.0, 2.0], [-2 / 3, -2 / 3]])
    flat = apply_credit([("aem", {"power": 0.0})], inputs["sample_advantages"], inputs)
    close(flat, [[1.0, 1.0], [-1.0, -1.0], [0.5, 0.5], [-0.5, -0.5]])


# --------------------------------------------------------------------------------------------- G²RPO length shaping
def _length_inputs(correct):
    lengths = [4, 2, 3, 3]
    mask = t([[1.0] * n + [0.0] * (4 - n) for n in lengths])
    return StepBatch(
        sample_advantages=t([1.0, 1.0, -1.0, -1.0]) if sum(correct) == 2 else t([1.5, -0.5, -0.5, -0.5]),
        mask=mask,
        group_ids=torch.tensor([0, 0, 0, 0]),
        rewards=t([[float(c)] for c in correct]),
    )


def test_length_shaping_prefers_short_correct_answers_on_easy_queries_and_long_ones_on_hard_queries():
    # lengths (4, 2, 3, 3): mean 3, population std √0.5 -> z = (√2, −√2, 0, 0)
    z = math.sqrt(2)
    easy = _length_inputs([1, 1, 0, 0])  # p = 0.5, not below the threshold: direct answers (d = −1)
    out = apply_credit([("length_shaping", {})], easy["sample_advantages"], easy)
    close(out[0], [1 - 0.1 * z] * 4, tol=1e-6)
    close(out[1, :2], [1 + 0.1 * z] * 2, tol=1e-6)
    close(out[2:, :3], [[-1.0] * 3] * 2)  # incorrect responses keep their advantage
    hard = _length_inputs([1, 0, 0, 0])  # p = 0.25: complex query (d = +1), the long correct answer gains
    out = apply_credit([("length_shaping", {})], hard["sample_advantages"], hard)
    close(out[0], [1.5 + 0.1 * z] * 4, tol=1e-6)
    close(out[1, :2], [-0.5, -0.5])


def test_length_shaping_reaches_all_correct_groups():
    inputs = StepBatch(
        sample_advantages=t([0.0, 0.0]),
        mask=t([[1, 1, 1], [1, 0, 0]]),
        group_ids=torch.tensor([3, 3]),
        rewards=t([[1.0], [1.0]]),
    )  # p = 1: direct; lengths (3, 1): z = (1, −1)
    out = apply_credit([("length_shaping", {"coef": 0.2})], inputs["sample_advantages"], inputs)
    close(out, [[-0.2, -0.2, -0.2], [0.2, 0.0, 0.0]], tol=1e-6)


# ------------------------------------------------------------------------------------------------------------ EM-RL
def test_entropy_reward_replaces_the_task_advantage_by_normalised_negative_entropy():
    inputs = StepBatch(
        sample_advantages=t([5.0, -5.0]),  # discarded
        mask=t([[1, 1], [1, 1]]),
        group_ids=torch.tensor([0, 0]),
        entropy=t([[0.5, 0.5], [1.0, 2.0]]),
        behaviour_logp=t([[-0.1, -0.2], [-1.0, -1.0]]),
    )
    # token: r = −ΣH = (−1, −3), mean −2, unbiased std √2 -> A = (1/√2, −1/√2)
    out = apply_credit([("entropy_reward", {})], inputs["sample_advantages"], inputs)
    close(out, [[1 / math.sqrt(2)] * 2, [-1 / math.sqrt(2)] * 2], tol=1e-6)
    # sequence: r = log π(o) = (−0.3, −2): the confident sample wins again
    out = apply_credit([("entropy_reward", {"level": "sequence"})], inputs["sample_advantages"], inputs)
    close(out, [[1 / math.sqrt(2)] * 2, [-1 / math.sqrt(2)] * 2], tol=1e-6)
    assert CREDIT_RULES.meta("entropy_reward")["replaces"]


# ------------------------------------------------------------------------------------------------- regularisers
def test_entropy_minimization_is_the_token_entropy_and_lowers_it():
    logits = torch.tensor([[[1.0, 0.5, 0.0], [0.2, 0.1, 0.0]]], dtype=F64, requires_grad=True)  # [1, 2, V]
    entropy = entropy_from_logits(logits)  # [1, 2]
    mask = t([[1.0, 0.0]])
    loss = REGULARIZERS.get("entropy_minimization")(*regularizer_inputs(logp=torch.zeros(1, 2, dtype=F64), mask=mask,
                                                                      entropy=entropy))  # fmt: skip
    close(loss.detach(), [[entropy[0, 0].item(), 0.0]])
    loss.sum().backward()
    with torch.no_grad():
        after = entropy_from_logits(logits - 1.0 * logits.grad)
    assert after[0, 0] < entropy[0, 0] and after[0, 1] == entropy[0, 1]  # one step lowers it; padding untouched


def test_entropy_band_pushes_mean_entropy_back_inside_the_band():
    entropy = t([[0.05, 0.15], [1.0, 2.6], [0.5, 0.7]]).requires_grad_(True)  # means 0.1, 1.8, 0.6
    inputs = regularizer_inputs(logp=torch.zeros(3, 2, dtype=F64), mask=torch.ones(3, 2, dtype=F64), entropy=entropy)
    loss = REGULARIZERS.get("entropy_band")(*inputs)  # band [0.2, 1.5]
    close(loss.detach(), [[0.1, 0.1], [0.3, 0.3], [0.0, 0.0]])
    loss.sum().backward()  # each row carries its hinge on 2 actions: ∂/∂H_t = ∓2·½
    close(entropy.grad, [[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="entropy_low <= entropy_high"):
        REGULARIZERS.get("entropy_band")(*inputs, entropy_low=1.0, entropy_high=0.5)
