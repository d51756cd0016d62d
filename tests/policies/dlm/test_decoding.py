"""Trainable decoding policies of masked diffusion LMs (Co-GRPO [179] count schedule, SAS [118] order head):
Plackett-Luce and count-schedule log-probabilities against hand-computed values, the sampling loop's pathwise
log-likelihood against the trace proxy, and the mechanisms (commits, forced steps, greedy decisions)."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.experimental.decoding.order import OrderHead, position_features
from genalign.experimental.decoding.schedule import CountSchedule, count_bounds
from genalign.policies.dlm.base import StepView, plackett_luce_logp, plackett_luce_sample
from genalign.policies.dlm.decoding import block_view, generate_with_decoding_policy
from genalign.policies.dlm.likelihood import LIKELIHOOD_PROXIES

MASK = 0


def approx(value: float):
    return pytest.approx(value, abs=1e-5)


def test_plackett_luce_logp_matches_hand_computation():
    scores = torch.log(torch.tensor([[1.0, 2.0, 3.0, 4.0]]))
    available = torch.tensor([[True, True, True, False]])  # position 3 already committed
    picks = torch.tensor([[2, 0, -1]])
    expected = math.log(3 / 6) + math.log(1 / 3)  # 3 of 1+2+3, then 1 of 1+2
    assert plackett_luce_logp(scores, available, picks).item() == approx(expected)
    assert plackett_luce_logp(scores, available, torch.tensor([[-1, -1, -1]])).item() == 0.0


def test_plackett_luce_sampling_frequencies_and_greedy_order():
    scores = torch.log(torch.tensor([[1.0, 3.0, 0.5]])).expand(4000, -1)
    available = torch.ones(4000, 3, dtype=torch.bool)
    counts = torch.ones(4000, dtype=torch.long)
    generator = torch.Generator().manual_seed(0)
    picks = plackett_luce_sample(scores, available, counts, greedy=False, generator=generator)  # [4000, 1]
    frequency = torch.bincount(picks[:, 0], minlength=3).float() / 4000
    torch.testing.assert_close(frequency, torch.tensor([1.0, 3.0, 0.5]) / 4.5, atol=0.03, rtol=0)
    greedy = plackett_luce_sample(scores[:1], available[:1], torch.tensor([3]), greedy=True, generator=None)
    assert greedy.tolist() == [[1, 0, 2]]


def test_count_bounds_leave_one_token_per_remaining_step_and_force_the_last():
    low, high = count_bounds(torch.tensor([8, 5, 3]), torch.tensor([0, 2, 3]), 4)
    assert low.tolist() == [1, 1, 3] and high.tolist() == [5, 4, 3]


def test_count_schedule_logp_is_the_masked_softmax_of_its_table():
    schedule = CountSchedule(4, 2, init_logit=3.0)  # LLaDA: 2 then 2 tokens
    assert schedule.count_logits[:, 1].tolist() == [3.0, 3.0]
    records = {"count": torch.tensor([[2, 2], [1, 3]]), "remaining": torch.tensor([[4, 2], [4, 3]])}
    logp, decision = schedule(records)
    # step 0: counts 1..3 allowed (one token must stay for step 1): softmax of (0, 3, 0)
    assert logp[0, 0].item() == approx(3 - math.log(math.exp(3) + 2))
    assert logp[1, 0].item() == approx(-math.log(math.exp(3) + 2))
    assert decision.tolist() == [[1.0, 0.0], [1.0, 0.0]]  # the last step commits what is left
    assert logp[:, 1].tolist() == [0.0, 0.0]
    logp.sum().backward()
    assert schedule.count_logits.grad[1].abs().sum() == 0 and schedule.count_logits.grad[0].abs().sum() > 0


def test_count_schedule_logp_of_a_two_block_trajectory_by_hand():
    # Bk = 4, S_b = 3, two blocks (6 steps); a known table φ[s_b, k − 1]
    schedule = CountSchedule(4, 3)
    with torch.no_grad():
        schedule.count_logits.copy_(torch.tensor([[0.0, 1.0, 2.0, 0.5], [0.3, -1.0, 0.0, 0.0], [5.0, 5.0, 5.0, 5.0]]))
    # sample 0: block 1 commits 2, 1, 1; block 2 commits 1, 2, 1. sample 1: block 1 commits 1, 1, 2; block 2 2, 1, 1
    records = {
        "count": torch.tensor([[2, 1, 1, 1, 2, 1], [1, 1, 2, 2, 1, 1]]),
        "remaining": torch.tensor([[4, 2, 1, 4, 3, 1], [4, 3, 2, 4, 2, 1]]),
    }
    logp, decision = schedule(records)
    # allowed counts 1 <= k <= r − (steps left after this one): step 0 with r = 4: k ∈ {1, 2} (φ 0, 1); step 1 with
    # r = 3: k ∈ {1, 2} (φ 0.3, −1); step 1 with r = 2 (k = 1 only) and every last step are forced (log π = 0)
    z0, z1 = math.log(1 + math.e), math.log(math.exp(0.3) + math.exp(-1.0))
    expected = [
        [1.0 - z0, 0.0, 0.0, 0.0 - z0, -1.0 - z1, 0.0],
        [0.0 - z0, 0.3 - z1, 0.0, 1.0 - z0, 0.0, 0.0],
    ]
    torch.testing.assert_close(logp, torch.tensor(expected), atol=1e-6, rtol=0)
    assert decision.tolist() == [[1.0, 0.0, 0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]]
    # the trajectory log-probabilities (what the count actions add to the sequence log-prob): −3.1675, −1.8675
    torch.testing.assert_close(
        logp.sum(1), torch.tensor([1.0 - 2 * z0 - 1.0 - z1, 1.0 - 2 * z0 + 0.3 - z1]), atol=1e-6, rtol=0
    )
    # gradient of sample 0's log-prob: ∂ log softmax_k / ∂φ_j = 1[j = k] − p_j over the allowed counts, 0 elsewhere;
    # row 0 has k = 2 then k = 1 under p = (1, e)/(1 + e): (1 − 2p_1)·(1, −1) = tanh(½)·(1, −1); row 1 has k = 2 under
    # q_1 = e^{0.3}/(e^{0.3} + e^{−1}): (−q_1, q_1); row 2 (forced last steps) gets nothing
    logp[0].sum().backward()
    q1 = math.exp(0.3) / (math.exp(0.3) + math.exp(-1.0))
    grad = [[math.tanh(0.5), -math.tanh(0.5), 0.0, 0.0], [-q1, q1, 0.0, 0.0], [0.0] * 4]
    torch.testing.assert_close(schedule.count_logits.grad, torch.tensor(grad), atol=1e-6, rtol=0)


def view_of(token_logp: list[float], candidates: list[bool], step: int, steps: int, vocab: int = 5) -> StepView:
    logits = torch.randn(1, len(token_logp), vocab, generator=torch.Generator().manual_seed(1))
    return StepView(
        token_logp=torch.tensor([token_logp]),
        logits=logits,
        candidates=torch.tensor([candidates]),
        step_in_block=step,
        steps_per_block=steps,
        scheduled=1,
    )


def test_count_schedule_commits_the_most_confident_candidates():
    schedule = CountSchedule(4, 2, init_logit=50.0)  # argmax and samples: LLaDA's 2 tokens
    view = view_of([-0.1, -2.0, -0.5, -0.05], [True, True, True, False], 0, 2)
    choice = schedule.choose(view, greedy=False, generator=torch.Generator().manual_seed(0))
    assert choice.commit.tolist() == [[True, False, True, False]]  # 2 best candidates; position 3 is decoded
    assert choice.record["count"].tolist() == [2] and choice.record["remaining"].tolist() == [3]


def test_position_features_by_hand():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.9, 0.1, 0.0]]]))  # [1, 2, 3]
    features = position_features(logits, torch.log(torch.tensor([[0.25, 0.9]])))  # [1, 2, 4]
    entropy0 = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    entropy1 = -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))
    expected = [
        [math.log(0.25), -entropy0, math.log(0.5) - math.log(0.25), 0.0],
        [math.log(0.9), -entropy1, math.log(0.9) - math.log(0.1), 1.0],
    ]
    torch.testing.assert_close(features[0], torch.tensor(expected), atol=1e-6, rtol=0)


def test_order_head_greedy_with_a_large_confidence_weight_is_low_confidence_remasking():
    head = OrderHead(4, 2, init_confidence_weight=100.0)
    view = StepView(
        token_logp=torch.tensor([[-0.3, -0.01, -2.0, -0.2]]),
        logits=torch.zeros(1, 4, 5),  # equal entropies and margins: only confidence and position differ
        candidates=torch.ones(1, 4, dtype=torch.bool),
        step_in_block=0,
        steps_per_block=2,
        scheduled=2,
    )
    choice = head.choose(view, greedy=True, generator=None)
    assert choice.record["picks"].tolist() == [[1, 3]] and choice.commit.tolist() == [[False, True, False, True]]
    records = {k: v.unsqueeze(1) for k, v in choice.record.items()}  # one step
    logp, decision = head(records)
    scores = 100.0 * torch.tensor([-0.3, -0.01, -2.0, -0.2])  # equal entropies / margins, position weight 0
    expected = (scores[1] - torch.logsumexp(scores, 0)) + (scores[3] - torch.logsumexp(scores[[0, 2, 3]], 0))
    assert logp.item() == approx(expected.item()) and decision.item() == 1.0


def toy_model_fn(vocab: int = 6):
    """Deterministic aligned logits that depend on the whole input (so order matters)."""
    table = torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(3))

    def call(input_ids, attention_mask):
        context = torch.nn.functional.one_hot(input_ids, vocab).float().mean(1, keepdim=True)  # [B, 1, V]
        position = torch.arange(input_ids.shape[1]).float()[None, :, None] * 0.3  # [1, L, 1]
        return table[input_ids] + context @ table + position  # [B, L, V]

    return call


def test_path_logp_sums_to_the_trace_likelihood_of_the_decoded_order():
    model_fn = toy_model_fn()
    prompts = torch.tensor([[3, 4], [5, 2]])
    head = OrderHead(4, 2)
    out = generate_with_decoding_policy(
        model_fn, prompts, head, prompt_attention_mask=None, mask_id=MASK, gen_length=8, block_length=4, steps=4,
        temperature=1.0, greedy_decisions=False, generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert out.num_forward == 4 and not (out.completion_ids == MASK).any()
    assert out.records["features"].shape == (2, 4, 4, 4) and out.records["picks"].shape == (2, 4, 2)
    assert sorted(out.decode_step[0].tolist()) == [0, 0, 1, 1, 2, 2, 3, 3]  # LLaDA's 2 tokens per step
    trace = LIKELIHOOD_PROXIES.get("trace")(
        model_fn, prompts, out.completion_ids, torch.ones(2, 8), mask_id=MASK, seeds=torch.zeros(2, dtype=torch.long),
        decode_step=out.decode_step,
    )  # fmt: skip
    torch.testing.assert_close(out.path_logp.sum(1), trace.logp.sum(1), atol=1e-5, rtol=0)
    logp, decision = head(out.records)
    assert decision.tolist() == [[1.0, 0.0, 1.0, 0.0]] * 2  # the second step of each block commits what is left
    assert torch.all(logp[:, [1, 3]] == 0) and torch.all(logp[:, [0, 2]] < 0)


def test_block_view_confidence_is_the_drawn_tokens_log_probability():
    logits = torch.log(torch.tensor([[[0.0, 0.2, 0.8], [0.0, 0.6, 0.4]]]))  # mask token (id 0) at -inf
    view = block_view(logits, torch.tensor([[2, 2]]), torch.tensor([[True, True]]), step_in_block=0, steps_per_block=1)
    torch.testing.assert_close(view.token_logp, torch.log(torch.tensor([[0.8, 0.4]])))
    assert view.scheduled == 2
