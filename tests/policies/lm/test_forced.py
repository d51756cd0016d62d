"""Causal-LM forced completions (``Policy.force``): the layout of a sampled rollout, exact re-scoring (alone and
joined with ``Rollout.cat``), text completions closed with the end token, truncation, behaviour log-probs, and the
``forced_completions`` capability (training rollouts always carry ``structure.action_ids``)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.base import Rollout, RolloutRequest
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.tiny import build_tiny_causal_lm

torch.set_num_threads(1)
PROMPTS = [{"prompt": "1 + 2 ="}, {"prompt": "what is 3 * 4 ? answer :"}, {"prompt": "a b c"}]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    path = build_tiny_causal_lm(tmp_path_factory.mktemp("models") / "qwen2", vocab_size=96)
    return build_policy(CausalLMPolicyConfig(model=str(path), max_new_tokens=8, temperature=0.9), "cpu")


def completions_of(rollout: Rollout) -> list[torch.Tensor]:
    lengths = rollout.action_mask.sum(1).long().tolist()
    return [ids[:n].clone() for ids, n in zip(rollout.per_sample["completion_ids"], lengths, strict=True)]


def test_capabilities_and_action_ids_without_asking(policy):
    caps = policy.capabilities
    assert caps.forced_completions and caps.guidance == {"hint", "prefix", "temperature", "self_hint"}
    rollout = policy.rollout(PROMPTS, 2)  # no structure requested
    mask = rollout.action_mask > 0
    expected = torch.where(mask, rollout.per_sample["completion_ids"], 0)
    assert torch.equal(rollout.structure.get("action_ids"), expected)
    assert rollout.left_padded == {"prompt_ids", "prompt_mask"}


def test_forcing_a_sampled_rollouts_completions_scores_identically(policy):
    sampled = policy.rollout(PROMPTS, 3, request=RolloutRequest(structure=frozenset({"segment_ids"})))
    forced = policy.force(
        sampled.rows, completions_of(sampled), [None] * len(sampled),
        request=RolloutRequest(structure=frozenset({"segment_ids"})),
    )  # fmt: skip
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"):
        assert torch.equal(forced.per_sample[key], sampled.per_sample[key]), key
    assert torch.equal(forced.action_mask, sampled.action_mask)
    assert torch.equal(forced.structure.get("truncated"), sampled.structure.get("truncated"))
    assert torch.equal(forced.structure.get("action_ids"), sampled.structure.get("action_ids"))
    assert torch.equal(forced.structure.get("segment_ids"), sampled.structure.get("segment_ids"))
    assert forced.outputs == sampled.outputs
    assert forced.group_ids.tolist() == list(range(len(sampled)))
    with torch.no_grad():
        forced_score, sampled_score = policy.score(forced).logp, policy.score(sampled).logp
    assert torch.equal(forced_score, sampled_score)
    # old_logp of completions nobody sampled: the current policy through the scoring pass, exactly
    assert torch.equal(forced.old_logp, forced_score)


def test_given_behaviour_logp_become_old_logp(policy):
    sampled = policy.rollout(PROMPTS[:2], 2)
    lengths = sampled.action_mask.sum(1).long().tolist()
    behaviour = [logp[:n].clone() for logp, n in zip(sampled.old_logp, lengths, strict=True)]
    forced = policy.force(sampled.rows, completions_of(sampled), [behaviour[0], None, behaviour[2], None])
    assert torch.equal(forced.old_logp[0], sampled.old_logp[0])
    assert torch.equal(forced.old_logp[2], sampled.old_logp[2])
    with torch.no_grad():
        current = policy.score(forced).logp
    assert torch.equal(forced.old_logp[1], current[1]) and torch.equal(forced.old_logp[3], current[3])


def test_text_completions_end_with_eos_and_long_ones_are_cut_and_truncated(policy):
    eos = policy.tokenizer.eos_token_id
    rows = [{"prompt": "1 + 2 ="}, {"prompt": "a b"}]
    forced = policy.force(rows, ["3", "a b c d e f g h i j"], [None, None])
    ids, mask = forced.per_sample["completion_ids"], forced.action_mask
    first = policy.tokenizer("3", add_special_tokens=False)["input_ids"]
    assert ids[0, :2].tolist() == [*first, eos] and mask[0].sum() == 2
    assert forced.outputs[0] == "3"
    assert mask[1].sum() == 8 and eos not in ids[1].tolist()  # cut at max_new_tokens = 8, no end token
    assert forced.structure.get("truncated").tolist() == [False, True]
    assert forced.outputs[1] == "a b c d e f g h"


def test_cat_of_a_sampled_and_a_forced_rollout_rescores_each_part(policy):
    sampled = policy.rollout(PROMPTS[:2], 2)
    rows = [{"prompt": "what is 3 * 4 ? answer : what is the answer ? the answer is"}, {"prompt": "1"}]
    forced = policy.force(rows, ["1 2", "a b c d e f g h i j k"], [None, None])
    joined = Rollout.cat([sampled, forced])
    assert joined.per_sample["prompt_mask"][:, -1].all(), "prompts stay left-padded after the join"
    with torch.no_grad():
        whole = policy.score(joined).logp
        parts = [policy.score(sampled).logp, policy.score(forced).logp]
    n = len(sampled)
    assert (whole[:n, : parts[0].shape[1]] - parts[0]).abs().max() <= 1e-6
    assert (whole[n:, : parts[1].shape[1]] - parts[1]).abs().max() <= 1e-6
    assert torch.all(whole[joined.action_mask == 0] == 0)


def test_bad_forced_input_is_rejected_naming_the_argument(policy):
    with pytest.raises(ValueError, match="behaviour_logp"):
        policy.force([{"prompt": "a"}], ["b"], [])
    with pytest.raises(ValueError, match=r"completions\[0\]"):
        policy.force([{"prompt": "a"}], [torch.tensor([1.0, 2.0])], [None])
    with pytest.raises(ValueError, match=r"behaviour_logp\[0\]"):
        policy.force([{"prompt": "a"}], [torch.tensor([5, 6, 1])], [torch.zeros(2)])
