"""vLLM request building from genalign's SamplingParams and reply parsing into a Generation (no vLLM needed)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from genalign.policies.lm.engines.base import SamplingParams, StopStringMatcher
from genalign.policies.lm.engines.vllm.generation import (
    build_generate_request,
    parse_generate_response,
    sampling_fields,
)
from genalign.policies.lm.tiny import build_tiny_tokenizer
from tests.policies.lm.engines.vllm_fakes import VLLM_SAMPLING_FIELDS

PAD, EOS = 0, 1
PARAMS = SamplingParams(max_new_tokens=4, temperature=0.7, eos_token_ids=(EOS, 5), pad_token_id=PAD)


def test_sampling_fields_map_every_setting_to_vllm_names():
    fields = sampling_fields(SamplingParams(max_new_tokens=9, temperature=0.6, eos_token_ids=(2, 7), stop=("STOP",)))
    assert set(fields) <= VLLM_SAMPLING_FIELDS
    assert fields == {
        "n": 1,
        "temperature": 0.6,
        "top_p": 1.0,
        "top_k": 0,
        "max_tokens": 9,
        "stop_token_ids": [2, 7],  # genalign's end tokens are the only ones ...
        "ignore_eos": True,  # ... vLLM's own EOS does not end a completion
        "stop": ["STOP"],
        "detokenize": True,  # stop strings are matched on text
        "skip_special_tokens": False,  # the text genalign's stop matcher decodes
        "logprobs": 0,  # the sampled token's processed (temperature) log-prob
    }
    plain = sampling_fields(PARAMS)
    assert plain["stop"] is None and plain["detokenize"] is False


@pytest.mark.parametrize(("top_k", "top_p"), [(5, 1.0), (0, 0.9)])
def test_top_k_and_top_p_are_refused_with_the_reason(top_k, top_p):
    with pytest.raises(ValueError, match="renormalised over the kept tokens"):
        sampling_fields(SamplingParams(max_new_tokens=2, top_k=top_k, top_p=top_p))


def test_request_strips_left_padding_and_draws_one_reproducible_seed_per_row():
    ids = torch.tensor([[PAD, PAD, 11, 12], [13, 14, 15, 16], [PAD, 17, 18, 19]])
    mask = (ids != PAD).long()
    first = build_generate_request(ids, mask, PARAMS, torch.Generator().manual_seed(3))
    again = build_generate_request(ids, mask, PARAMS, torch.Generator().manual_seed(3))
    other = build_generate_request(ids, mask, PARAMS, torch.Generator().manual_seed(4))
    assert first["prompts"] == [[11, 12], [13, 14, 15, 16], [17, 18, 19]]
    assert first["seeds"] == again["seeds"] and first["seeds"] != other["seeds"]
    assert len(set(first["seeds"])) == 3 and all(0 <= s < 2**31 - 1 for s in first["seeds"])
    assert first["sampling"] == sampling_fields(PARAMS)


def reply(*rows):
    return {"outputs": [{"token_ids": t, "logprobs": lp, "finish_reason": "stop"} for t, lp in rows]}


def test_reply_becomes_masks_and_logprobs_cut_after_the_end_token():
    response = reply(([7, EOS], [-0.5, -0.25]), ([8, 9, 10, 11], [-1.0, -2.0, -3.0, -4.0]), ([5], [-0.125]))
    out = parse_generate_response(response, PARAMS, None, batch=3, device=torch.device("cpu"))
    assert out.completion_ids.tolist() == [[7, EOS, PAD, PAD], [8, 9, 10, 11], [5, PAD, PAD, PAD]]
    assert out.completion_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert out.logp.tolist() == [[-0.5, -0.25, 0, 0], [-1.0, -2.0, -3.0, -4.0], [-0.125, 0, 0, 0]]
    assert out.truncated.tolist() == [False, True, False]


def test_padding_equal_to_an_end_token_never_ends_a_row_vllm_stopped_without_one():
    params = SamplingParams(max_new_tokens=4, eos_token_ids=(PAD,), pad_token_id=PAD)  # pad == eos, as is common
    # row 0: vLLM stopped on a stop string the decoded text does not show; row 1 ran to max_tokens
    response = reply(([7, 8], [-1.0, -1.0]), ([3, 4, 5, 6], [-1.0] * 4))
    out = parse_generate_response(response, params, None, batch=2, device=torch.device("cpu"))
    assert out.completion_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert out.truncated.tolist() == [True, True]
    assert out.logp[0, 2:].abs().sum() == 0


def test_stop_strings_end_a_row_with_the_same_rule_as_the_other_engines():
    tokenizer = build_tiny_tokenizer(96)
    words = tokenizer.convert_tokens_to_ids(["a", "b", "STOP", "c"])
    params = SamplingParams(max_new_tokens=4, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=0, stop=("STOP",))
    matcher = StopStringMatcher(tokenizer, params.stop)
    response = reply((words[:3], [-1.0, -2.0, -3.0]), ([*words[:2], words[3], words[0]], [-1.0] * 4))
    out = parse_generate_response(response, params, matcher, batch=2, device=torch.device("cpu"))
    assert out.completion_mask.sum(1).tolist() == [3, 4]  # the token completing the stop string is the last action
    assert out.truncated.tolist() == [False, True]


@pytest.mark.parametrize(
    ("response", "message"),
    [
        ({"outputs": []}, "0 outputs for 1 prompts"),
        (reply(([1, 2], [-1.0])), "2 tokens and 1 log-probs"),
        (reply(([], [])), "needs >= 1 token"),
        (reply(([3], [math.nan])), "non-finite log-prob"),
    ],
)
def test_malformed_replies_raise_naming_the_problem(response, message):
    with pytest.raises(RuntimeError, match=message):
        parse_generate_response(response, PARAMS, None, batch=1, device=torch.device("cpu"))


def test_request_body_is_plain_json():
    body = build_generate_request(torch.tensor([[4, 5]]), torch.ones(1, 2), PARAMS, torch.Generator().manual_seed(0))
    assert json.loads(json.dumps(body)) == body
