"""Causal-LM forced continuations (``Policy.force(..., continues=...)``): a given start is continued by the rollout
engine within the room ``max_new_tokens`` leaves it; the behaviour log-probs are the given ones on the start, the
current policy's exactly where a start token has none (NaN, an inserted cue), and the engine's on the sampled rest,
which re-scoring reproduces as it does for a sampled rollout. A start that already ended is not continued."""

from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.tiny import build_tiny_causal_lm

torch.set_num_threads(1)
ROWS = [{"prompt": "1 + 2 ="}, {"prompt": "what is 3 * 4 ? answer :"}, {"prompt": "a b c"}]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    path = build_tiny_causal_lm(tmp_path_factory.mktemp("models") / "qwen2", vocab_size=96)
    return build_policy(CausalLMPolicyConfig(model=str(path), max_new_tokens=8, temperature=0.9), "cpu")


def starts_of(policy) -> list[torch.Tensor]:
    """Starts of 2, 3 and 1 tokens that contain no end token (ids well inside the vocabulary)."""
    eos = set(policy.eos_token_ids)
    ids = [i for i in range(10, 60) if i not in eos]
    return [torch.tensor(ids[:2]), torch.tensor(ids[2:5]), torch.tensor(ids[5:6])]


def test_a_continued_start_keeps_its_tokens_and_behaviour_and_the_rest_is_sampled(policy):
    starts = starts_of(policy)
    given = [torch.tensor([-0.5, -0.25]), torch.tensor([-1.0, math.nan, -2.0]), None]
    forced = policy.force(ROWS, starts, given, continues=[True, True, True])
    ids, mask = forced.per_sample["completion_ids"], forced.action_mask
    lengths = mask.sum(1).long().tolist()
    for row, start in enumerate(starts):
        assert ids[row, : len(start)].tolist() == start.tolist()
        assert lengths[row] > len(start), "the engine continued the start"
        assert lengths[row] <= 8
    assert forced.counts["continued"] == 3 and forced.counts["continued_tokens"] == sum(lengths) - 6
    with torch.no_grad():
        scored = policy.score(forced).logp  # [3, C]
    old = forced.old_logp
    # given behaviour log-probs stay; the NaN cue token and the start without any are the current policy's, exactly
    assert old[0, :2].tolist() == [-0.5, -0.25]
    assert old[1, 0].item() == -1.0 and old[1, 2].item() == -2.0
    assert old[1, 1].item() == scored[1, 1].item()
    assert torch.equal(old[2, :1], scored[2, :1])
    # the sampled rest: the engine's log-probs, which the scoring pass reproduces up to KV-cache rounding
    for row, start in enumerate(starts):
        rest = slice(len(start), lengths[row])
        assert (old[row, rest] - scored[row, rest]).abs().max().item() < 1e-4
    assert torch.all(old[mask == 0] == 0)


def test_without_the_flag_the_start_is_the_whole_completion(policy):
    starts = starts_of(policy)
    forced = policy.force(ROWS, starts, [None, None, None], continues=[False, True, False])
    lengths = forced.action_mask.sum(1).long().tolist()
    assert lengths[0] == 2 and lengths[2] == 1 and lengths[1] > 3
    assert forced.structure.get("truncated").tolist()[0] is False  # below the limit: no truncation flag
    assert forced.counts["continued"] == 1


def test_an_ended_or_full_start_is_not_continued_and_the_limit_holds(policy):
    eos = policy.tokenizer.eos_token_id
    ended = torch.tensor([11, 12, eos])
    full = torch.arange(20, 28)  # 8 tokens = max_new_tokens: no room left
    long = torch.arange(30, 41)  # 11 tokens: cut to the limit, no room left
    forced = policy.force(ROWS, [ended, full, long], [None, None, None], continues=[True, True, True])
    assert forced.counts["continued"] == 0
    assert forced.action_mask.sum(1).long().tolist() == [3, 8, 8]
    assert forced.structure.get("truncated").tolist() == [False, True, True]


def test_continuations_cut_each_row_to_its_own_room_and_follow_the_generator(policy):
    rows = [{"prompt": "a"}, {"prompt": "b"}]
    starts = [torch.arange(10, 17), torch.tensor([40])]  # 7 tokens leave room for 1; 1 token leaves room for 7
    state = policy.generator.get_state()
    first = policy.force(rows, starts, [None, None], continues=[True, True])
    assert first.action_mask.sum(1).long().tolist()[0] == 8
    assert first.action_mask.sum(1).long().tolist()[1] <= 8
    policy.generator.set_state(state)
    again = policy.force(rows, starts, [None, None], continues=[True, True])
    assert torch.equal(first.per_sample["completion_ids"], again.per_sample["completion_ids"])
    assert torch.equal(first.old_logp, again.old_logp)


def test_bad_continuation_flags_are_rejected_naming_the_argument(policy):
    with pytest.raises(ValueError, match="continues"):
        policy.force(ROWS[:1], [torch.tensor([11])], [None], continues=[True, False])
