"""Ratio levels with real structure (issue 17, item 3), hand-computed: SSPO [15] with sentences taken from the
completion text, entropy-grouped importance ratios (ESPO [103]) and FiberPO's nested gates [108]."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import RATIO_LEVELS, StepBatch, policy_loss
from genalign.config.schema import AlgorithmConfig
from genalign.policies.lm.segments import SegmentBoundaries

F64 = torch.float64


def run(log_ratios, advantages, *, batch=None, **kwargs):
    """Log-ratios ``[N, T]`` around ``old = 0``: returns (loss [N, T], d loss.sum() / d logp [N, T])."""
    log_ratio = torch.tensor(log_ratios, dtype=F64)
    logp = log_ratio.clone().requires_grad_(True)
    mask = torch.ones_like(log_ratio)
    loss, _ = policy_loss(logp, torch.zeros_like(logp), torch.tensor(advantages, dtype=F64), mask, batch=batch,
                          **kwargs)  # fmt: skip
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    return loss.detach(), grad


def close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=F64), rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------------------------------------- SSPO sentences
class WordTokenizer:
    """The two calls :class:`SegmentBoundaries` makes of a tokenizer, over a fixed word list."""

    words = ["<pad>", "The", " sum", " is", " 4", ".", " So", " x", "=2", "!", "\n"]

    def __len__(self) -> int:
        return len(self.words)

    def batch_decode(self, ids, skip_special_tokens=True):
        return ["" if self.words[i[0]] == "<pad>" else self.words[i[0]] for i in ids]


def test_sspo_ratio_is_per_sentence_of_the_completion_text():
    # "The sum is 4. So x=2!\n<pad>": boundaries after "." , "!" and "\n" -> sentences {0..4}, {5..8}, {9}
    tokenizer = WordTokenizer()
    text = ["The", " sum", " is", " 4", ".", " So", " x", "=2", "!", "\n", "<pad>"]
    ids = torch.tensor([[tokenizer.words.index(w) for w in text]])
    mask = torch.tensor([[1.0] * 10 + [0.0]])
    segment_ids = SegmentBoundaries(tokenizer)(ids, mask)
    assert segment_ids.tolist() == [[0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 3]]
    log_ratio = [[0.1, 0.3, -0.2, 0.0, 0.3, 0.4, 0.0, 0.0, 0.0, -0.1, 0.0]]
    loss, grad = run(log_ratio, [1.0], ratio_level="sentence", clip="ppo", batch=StepBatch(segment_ids=segment_ids))
    # sentence means: 0.1 (5 tokens), 0.1 (4 tokens), −0.1 (1 token); ppo ε 0.2: e^{0.1} = 1.105 < 1.2, unclipped
    close(loss[0, :10], [-math.exp(0.1)] * 9 + [-math.exp(-0.1)])
    close(grad[0, :10], [-math.exp(0.1)] * 9 + [-math.exp(-0.1)])  # each sentence's gradient spread over its tokens


def test_sspo_asks_the_rollout_for_text_sentences():
    assert RATIO_LEVELS.meta("sentence")["needs"] == ("segment_ids",)
    needs = AlgorithmConfig(ratio_level="sentence").needs()
    assert needs["segment_ids"] == ["algorithm.ratio_level = 'sentence'"]
    assert "entropy" in AlgorithmConfig(ratio_level="entropy_grouped").needs()
    assert "segment_ids" not in AlgorithmConfig().needs()


# --------------------------------------------------------------------------------------------------- ESPO groups
def test_entropy_groups_get_one_ratio_each():
    # entropy ranks: idx3 (0.1) < idx1 (0.5) < idx2 (1.5) < idx0 (2.0); K = 2 -> {1, 3} low, {0, 2} high
    entropy = torch.tensor([[2.0, 0.5, 1.5, 0.1]], dtype=F64)
    loss, grad = run(
        [[0.1, 0.3, -0.2, 0.0]], [1.0], ratio_level="entropy_grouped", clip="none",
        batch=StepBatch(entropy=entropy), num_groups=2,
    )  # fmt: skip
    # low group mean ℓ = (0.3 + 0.0)/2 = 0.15, high group (0.1 − 0.2)/2 = −0.05
    close(loss, [[-math.exp(-0.05), -math.exp(0.15), -math.exp(-0.05), -math.exp(0.15)]])
    close(grad, [[-math.exp(-0.05), -math.exp(0.15), -math.exp(-0.05), -math.exp(0.15)]])


def test_entropy_groups_get_trust_regions_sized_by_their_entropy():
    # both groups have mean ℓ = 0.15 (ratio 1.1618); entropy_adaptive sees the group means 0.3 and 1.75 (row mean
    # 1.025): low group scale 0.29 -> clamped 0.5, ε_high 0.1 (clipped at 1.1); high group scale 1.707, ε_high 0.341
    entropy = torch.tensor([[2.0, 0.5, 1.5, 0.1]], dtype=F64)
    loss, grad = run(
        [[0.25, 0.3, 0.05, 0.0]], [1.0], ratio_level="entropy_grouped", clip="entropy_adaptive",
        batch=StepBatch(entropy=entropy), num_groups=2,
    )  # fmt: skip
    close(loss, [[-math.exp(0.15), -1.1, -math.exp(0.15), -1.1]])
    close(grad, [[-math.exp(0.15), 0.0, -math.exp(0.15), 0.0]])
    plain, _ = run(
        [[0.25, 0.3, 0.05, 0.0]], [1.0], ratio_level="entropy_grouped", clip="ppo",
        batch=StepBatch(entropy=entropy), num_groups=2,
    )  # fmt: skip
    close(plain, [[-math.exp(0.15)] * 4])  # ε = 0.2 for both: nothing clipped


def test_one_entropy_group_is_the_sequence_ratio():
    generator = torch.Generator().manual_seed(0)
    log_ratio = (0.1 * torch.randn(3, 5, generator=generator, dtype=F64)).tolist()
    context = StepBatch(entropy=torch.rand(3, 5, generator=generator, dtype=F64))
    grouped = run(log_ratio, [1.0, -0.5, 2.0], ratio_level="entropy_grouped", batch=context, num_groups=1)
    sequence = run(log_ratio, [1.0, -0.5, 2.0], ratio_level="sequence")
    for a, b in zip(grouped, sequence, strict=True):
        torch.testing.assert_close(a, b)


# ---------------------------------------------------------------------------------------------------- FiberPO
def test_fiber_gate_clips_a_token_residual_inside_an_open_base_gate():
    # s = 0.1 (base open: e^{0.1} < 1.2); residuals (0.2, −0.2); fiber band log(1.1) = 0.0953 caps token 0 (A > 0)
    loss, grad = run([[0.3, -0.1]], [1.0], ratio_level="fiber", clip="ppo", fiber_eps_low=0.1, fiber_eps_high=0.1)
    w0 = math.exp(0.1) * 1.1  # ℓ̃_0 = s + log 1.1, gradient only through s (½ per token)
    close(loss, [[-w0, -math.exp(-0.1)]])  # ℓ̃_1 = s + (ℓ_1 − s) = ℓ_1
    close(grad, [[-w0 / 2, -w0 / 2 - math.exp(-0.1)]])


def test_a_closed_base_gate_freezes_the_aggregate_but_not_the_redistribution_among_tokens():
    # s = 0.4: e^{0.4} > 1.2 -> base clipped at log 1.2 (no gradient); residuals ±0.1 inside the fiber band
    loss, grad = run([[0.5, 0.3]], [1.0], ratio_level="fiber", clip="ppo")
    w = [1.2 * math.exp(0.1), 1.2 * math.exp(-0.1)]
    close(loss, [[-w[0], -w[1]]])
    # ℓ̃_t = log 1.2 + ℓ_t − s: d(Σ −e^{ℓ̃})/dℓ_u = −Σ_t e^{ℓ̃_t}(δ_tu − ½) = ∓½(w_0 − w_1): sums to 0 over the row
    close(grad, [[-(w[0] - w[1]) / 2, (w[0] - w[1]) / 2]])
    # token 0's residual is beyond a fiber band of ε_f⁺ = 0.05 (A > 0): only token 1's residual term carries gradient
    loss, grad = run([[0.5, 0.3]], [1.0], ratio_level="fiber", clip="ppo", fiber_eps_high=0.05)
    close(grad, [[0.5 * 1.2 * math.exp(-0.1), -0.5 * 1.2 * math.exp(-0.1)]])


def test_fiber_jacobian_is_the_identity_on_policy():
    advantages = [0.7, -1.3]
    fiber = run([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], advantages, ratio_level="fiber", clip="ppo")
    token = run([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], advantages, ratio_level="token", clip="ppo")
    close(fiber[1], token[1].tolist())  # −A on every token: the token-level policy gradient
    with pytest.raises(ValueError, match="fiber_eps_low"):
        run([[0.0]], [1.0], ratio_level="fiber", fiber_eps_low=1.0)
