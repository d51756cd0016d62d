"""Ranked-list rewards of F-GRPO [303]: ``list_coverage`` (order-invariant) and ``ranking_utility`` (NDCG) against
hand-computed values, per phase of a completion split at a marker."""

from __future__ import annotations

import math

import pytest

from genalign.rewards import reward_factory

RELEVANT = [["b", "d", "x"]]


def reward(name: str, completion: str, relevant=None, **args) -> float | None:
    return reward_factory(name)(**args)(["p"], [completion], relevant=relevant or RELEVANT)[0]


def test_coverage_is_the_recall_of_the_relevant_set_whatever_the_order():
    assert reward("list_coverage", "a, b, c, d", penalize_extra=False) == pytest.approx(2 / 3)
    assert reward("list_coverage", "d\nB, a, b") == pytest.approx(2 / 3)  # order, case and repeats do not matter
    assert reward("list_coverage", "a, b, c, d", penalize_extra=True) == pytest.approx(2 / 4)  # 4 listed > 3 relevant
    assert reward("list_coverage", "", relevant=[[]]) is None  # no relevant item: not applicable


def test_utility_is_ndcg_of_the_ranked_list():
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert reward("ranking_utility", "a, b, c, d") == pytest.approx((1 / math.log2(3) + 1 / math.log2(5)) / ideal)
    assert reward("ranking_utility", "d, b, x") == pytest.approx(1.0)
    # the same set in a worse order scores lower: the utility is position-aware, the coverage is not
    assert reward("ranking_utility", "a, d, b") < reward("ranking_utility", "d, b, a")
    assert reward("list_coverage", "a, d, b") == reward("list_coverage", "d, b, a")
    # graded gains and a cut-off k = 2: DCG = 0 + 3 / log2(3); IDCG = 3 + 1 / log2(3)
    graded = [{"b": 1, "d": 3}]
    got = reward("ranking_utility", "a, d, b", relevant=graded, k=2)
    assert got == pytest.approx((3 / math.log2(3)) / (3 + 1 / math.log2(3)))


def test_each_phase_reads_its_part_of_the_completion():
    text = "a, b, d, x RANK d, a"
    assert reward("list_coverage", text, marker="RANK", part="before", penalize_extra=False) == pytest.approx(1.0)
    assert reward("list_coverage", text, marker="RANK", part="after") == pytest.approx(1 / 3)
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert reward("ranking_utility", text, marker="RANK", part="after") == pytest.approx(1 / ideal)
    assert reward("ranking_utility", "b, d", marker="RANK", part="after") == 0.0  # marker missing: 0
    with pytest.raises(ValueError, match="set a marker"):
        reward("list_coverage", text, part="after")
    assert (
        reward("list_coverage", "12, 7", relevant=[7], penalize_extra=False) == 1.0
    )  # one number: a single relevant item
    with pytest.raises(ValueError, match="column 'relevant' holds True"):
        reward("list_coverage", text, relevant=[True])


def test_listing_the_whole_pool_does_not_forge_coverage():
    """Plain recall pays 1 for a completion that lists every candidate; the default divides by the longer list."""
    pool = ", ".join("abcdefghix")  # every candidate, the relevant b, d, x among them
    assert reward("list_coverage", pool, penalize_extra=False) == pytest.approx(1.0)  # the forgery plain recall pays
    assert reward("list_coverage", pool) == pytest.approx(3 / 10)  # the default: 3 relevant hits of 10 listed
    assert reward("list_coverage", pool) < reward("list_coverage", "b, d") == pytest.approx(2 / 3)
