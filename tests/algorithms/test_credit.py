"""Token-level credit rules: hand-computed entropy weighting, forking tokens, polarity weights and future KL; the
chain of rules and its order check."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import (
    CREDIT_RULES,
    HyperparameterError,
    StepBatch,
    apply_credit,
    check_hyperparameters,
    check_rule_order,
)

F64 = torch.float64
ADV = torch.tensor([1.0, -1.0], dtype=F64)
MASK = torch.ones(2, 2)
ENTROPY = torch.tensor([[1.0, 3.0], [1.0, 4.0]], dtype=F64)
GROUPS = torch.tensor([0, 0])


def inputs(adv=ADV, mask=MASK, entropy=ENTROPY, **fields) -> StepBatch:
    return StepBatch(
        sample_advantages=adv, mask=mask, group_ids=torch.zeros(len(adv), dtype=torch.long), entropy=entropy, **fields
    )


def weights(name: str, adv=ADV, mask=MASK, entropy=ENTROPY, **hp) -> torch.Tensor:
    """The rule's multiplier: its output on all-ones incoming advantages."""
    credit = inputs(adv, mask, entropy, behaviour_logp=hp.pop("logp", None), progress=hp.pop("progress", None))
    return CREDIT_RULES.get(name)(torch.ones(mask.shape, dtype=F64), credit, **hp)


def test_no_rule_keeps_sample_advantages():
    assert apply_credit([], ADV, inputs()) is ADV


def test_entropy_weighted_token_level():
    w = weights("entropy_weighted", alpha=1.0)
    # positive: H / mean(1, 3) = [0.5, 1.5]; negative: (1/H) / mean(1, 1/4) = [1.6, 0.4]
    torch.testing.assert_close(w, torch.tensor([[0.5, 1.5], [1.6, 0.4]], dtype=F64))
    torch.testing.assert_close(weights("entropy_weighted", alpha=0.5), 0.5 + 0.5 * w)
    # the rule multiplies the incoming per-action advantages
    out = CREDIT_RULES.get("entropy_weighted")(ADV[:, None].expand(2, 2), inputs(), alpha=1.0)
    torch.testing.assert_close(out, ADV[:, None] * w)


def test_entropy_weighted_sequence_level_and_zero_advantage():
    adv = torch.tensor([1.0, 1.0, 0.0], dtype=F64)
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]])
    entropy = torch.tensor([[1.0, 3.0], [4.0, 99.0], [5.0, 5.0]], dtype=F64)
    w = weights("entropy_weighted", adv, mask, entropy, alpha=1.0, level="sequence")
    # sequence entropies 2 and 4 (padding ignored), mean 3 -> 2/3 and 4/3 on every action; A = 0 -> 1
    torch.testing.assert_close(w[:, 0], torch.tensor([2 / 3, 4 / 3, 1.0], dtype=F64))
    torch.testing.assert_close(w[0], torch.tensor([2 / 3, 2 / 3], dtype=F64))


def test_high_entropy_tokens_top_fraction_with_ties():
    assert weights("high_entropy_tokens", rho=0.5).tolist() == [[0.0, 1.0], [0.0, 1.0]]
    ties = torch.tensor([[2.0, 2.0], [1.0, 9.0]], dtype=F64)
    mask = torch.tensor([[1, 1], [1, 0]])  # the 9.0 is padding and never selected
    assert weights("high_entropy_tokens", ADV, mask, ties, rho=0.25).tolist() == [[1.0, 1.0], [0.0, 0.0]]


def test_entropy_driven_scales_by_inverse_relative_entropy():
    # sequence entropies 2 and 2.5, batch mean 2.25 -> weights 1.125 and 0.9
    torch.testing.assert_close(weights("entropy_driven")[:, 0], torch.tensor([1.125, 0.9], dtype=F64))
    entropy = torch.tensor([[1.0, 3.0], [0.5, 9.0]], dtype=F64)
    mask = torch.tensor([[1, 1], [1, 0]])
    # sequence means 2 and 0.5, batch mean 1.25 -> 0.625 and 2.5 (clamped to 2)
    w = weights("entropy_driven", ADV, mask, entropy)
    torch.testing.assert_close(w, torch.tensor([[0.625, 0.625], [2.0, 2.0]], dtype=F64))


def test_bad_input():
    with pytest.raises(ValueError, match="alpha must be in"):
        weights("entropy_weighted", alpha=2.0)
    with pytest.raises(ValueError, match="rho must be in"):
        weights("high_entropy_tokens", rho=0.0)
    with pytest.raises(ValueError, match=r"sample_advantages must have shape \[N\]=\[2\]"):
        StepBatch(sample_advantages=ADV[:1], mask=MASK, group_ids=GROUPS)
    with pytest.raises(ValueError, match=r"entropy must have shape \[N, T\]=\[2, 2\]"):
        StepBatch(sample_advantages=ADV, mask=MASK, group_ids=GROUPS, entropy=ENTROPY[:, :1])
    with pytest.raises(ValueError, match=r"needs the signal 'entropy'"):
        CREDIT_RULES.get("high_entropy_tokens")(
            torch.ones(2, 2), StepBatch(sample_advantages=ADV, mask=MASK, group_ids=GROUPS)
        )
    with pytest.raises(HyperparameterError, match=r"'high_entropy_tokens'.*Accepted keywords: rho"):
        check_hyperparameters(CREDIT_RULES, "high_entropy_tokens", {"top_p": 0.2})


def test_polarity_token_weights_by_behaviour_probability_and_sign():
    adv = torch.tensor([1.0, -1.0, 0.0], dtype=F64)
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]])
    probs = torch.tensor([[0.2, 0.9], [0.2, 0.9], [0.5, 0.5]], dtype=F64)
    entropy = torch.zeros(3, 2, dtype=F64)
    w = weights("polarity_token_weights", adv, mask, entropy, logp=probs.log(), alpha_pos=0.5, alpha_neg=1.0)
    # A > 0: 1 + 0.5·(1 − p) = [1.4, 1.05]; A < 0: 1 + 1.0·p = [1.2, 1.9]; A = 0 and padding: 1
    torch.testing.assert_close(w, torch.tensor([[1.4, 1.05], [1.2, 1.9], [1.0, 1.0]], dtype=F64))
    annealed = weights(
        "polarity_token_weights",
        adv,
        mask,
        entropy,
        logp=probs.log(),
        progress=0.75,
        alpha_pos=0.5,
        alpha_neg=1.0,
        anneal=True,
    )  # fmt: skip  α·(1 − 0.75)
    torch.testing.assert_close(annealed, torch.tensor([[1.1, 1.0125], [1.05, 1.225], [1.0, 1.0]], dtype=F64))
    ended = weights("polarity_token_weights", adv, mask, entropy, logp=probs.log(), progress=1.0, anneal=True)
    assert torch.equal(ended, torch.ones(3, 2, dtype=F64))


def test_polarity_token_weights_needs_logp_progress_and_valid_alphas():
    with pytest.raises(ValueError, match=r"needs the signal 'behaviour_logp'"):
        weights("polarity_token_weights")
    with pytest.raises(ValueError, match=r"anneal=True needs progress in \[0, 1\], got None"):
        weights("polarity_token_weights", logp=-ENTROPY, anneal=True)
    with pytest.raises(ValueError, match="alpha_pos and alpha_neg must be >= 0"):
        weights("polarity_token_weights", logp=-ENTROPY, alpha_neg=-1.0)


def test_future_kl_subtracts_the_reverse_cumulative_kl():
    kl = torch.tensor([[0.1, 0.2, 0.3], [1.0, 1.0, 5.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=F64)
    credit = StepBatch(sample_advantages=torch.tensor([1.0, -1.0], dtype=F64), mask=mask, group_ids=GROUPS, kl=kl)
    out = CREDIT_RULES.get("future_kl")(torch.tensor([[1.0] * 3, [-1.0] * 3], dtype=F64), credit, coef=0.5)
    # row 0: 1 − 0.5·(0.6, 0.5, 0.3); row 1: −1 − 0.5·(2, 1), padding 0 (its KL ignored)
    torch.testing.assert_close(out, torch.tensor([[0.7, 0.75, 0.85], [-2.0, -1.5, 0.0]], dtype=F64))
    with pytest.raises(ValueError, match=r"needs the signal 'kl'"):
        CREDIT_RULES.get("future_kl")(
            torch.ones(2, 3), StepBatch(sample_advantages=torch.ones(2), mask=mask.float(), group_ids=GROUPS)
        )


def test_rules_chain_in_order_and_replacing_rules_must_come_first():
    credit = inputs(kl=torch.ones(2, 2, dtype=F64))
    chained = apply_credit([("high_entropy_tokens", {"rho": 0.5}), ("future_kl", {"coef": 1.0})], ADV, credit)
    # forking tokens keep column 1 (A, A·0 elsewhere), then future KL subtracts (2, 1)
    torch.testing.assert_close(chained, torch.tensor([[-2.0, 0.0], [-2.0, -2.0]], dtype=F64))
    check_rule_order(["tree", "noise_aware_steps"])
    with pytest.raises(ValueError, match="put it first"):
        check_rule_order(["noise_aware_steps", "tree"])


def test_every_rule_declares_docs_meta_and_needs():
    for name in CREDIT_RULES.names():
        meta = CREDIT_RULES.meta(name)
        assert {"formula", "source", "summary"} <= set(meta), name
        assert isinstance(meta.get("needs", ()), tuple), name
