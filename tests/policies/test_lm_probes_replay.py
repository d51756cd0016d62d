"""Rollout-time replay probes of the causal-LM family (:mod:`genalign.policies.lm.probes`): the reward of every segment
prefix (``prefix_rewards``, Rank-GRPO [104]) scores the decoded prefixes without generating, and the counterfactual
log-probs (``counterfactual_logp``, CoRT [275]) equal the completion scored after the row's other prompt through the full
logits; the counterfactual probe is a capability only when its column is configured."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.base import RolloutRequest
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.probes import ProbeOptions, counterfactual_logprobs, prefix_rewards, segment_ends
from genalign.policies.lm.tiny import build_tiny_causal_lm
from tests.policies.test_lm_probes import full_logits_scores, hand_rollout

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    path = build_tiny_causal_lm(tmp_path_factory.mktemp("replay_probe_model"), architecture="qwen2", vocab_size=96)
    probes = ProbeOptions(counterfactual_column="plain", batch_size=3)
    return build_policy(CausalLMPolicyConfig(model=str(path), max_new_tokens=6, temperature=0.8, probes=probes))


def test_prefix_rewards_score_the_text_of_every_segment_state(policy):
    rollout = hand_rollout(policy, ["1 + 2 =", "1 + 2 ="], ["3 . 3 .", "4"], ["3", "3"])
    segments = policy.segments(rollout.per_sample["completion_ids"], rollout.action_mask)
    assert segment_ends(segments, rollout.action_mask) == [[0, 2, 4, 5], [0, 2]]  # "3 ." | "3 ." | <eos>; "4 <eos>"
    scored = []

    def reward(rows, outputs):
        scored.extend(outputs)
        return torch.tensor([10.0 * len(o) + (o.count("3")) for o in outputs])  # deterministic in the text

    values = prefix_rewards(policy, rollout, segments, reward)
    # sample 0: "" -> 0, "3 ." -> 31, "3 . 3 ." -> 72, own output "3 . 3 ." -> 72; sample 1: "" -> 0, own "4" -> 10
    expected = torch.tensor([[0.0, 31.0, 72.0, 72.0], [0.0, 10.0, torch.nan, torch.nan]])
    torch.testing.assert_close(values, expected, equal_nan=True)
    assert scored == ["", "3 .", "3 . 3 .", "3 . 3 .", "", "4"]  # no continuation was generated
    with pytest.raises(ValueError, match="reward_probe"):
        prefix_rewards(policy, rollout, segments, None)


def test_counterfactual_logprobs_equal_the_completion_scored_after_the_other_prompt(policy):
    rollout = hand_rollout(policy, ["1 + 2 = check it", "3 + 4 = check it"], ["3 .", "7 . 7"], ["3", "7"])
    for row, plain in zip(rollout.rows, ["1 + 2 =", "3 + 4 ="], strict=True):
        row["plain"] = plain
    replayed = counterfactual_logprobs(policy, rollout)
    tok = policy.tokenizer
    for i, plain in enumerate(["1 + 2 =", "3 + 4 ="]):
        target = rollout.per_sample["completion_ids"][i][rollout.action_mask[i] > 0].tolist()
        logp, _ = full_logits_scores(policy, tok(plain)["input_ids"], target, temperature=0.8)
        torch.testing.assert_close(replayed[i, : len(target)], logp, atol=1e-5, rtol=0)
        assert torch.all(replayed[i, len(target) :] == 0)
    rollout.rows[1]["plain"] = ""
    with pytest.raises(ValueError, match=r"column 'plain' \(policy.probes.counterfactual_column\)"):
        counterfactual_logprobs(policy, rollout)


def test_the_counterfactual_probe_is_a_capability_only_with_its_column(policy):
    assert "counterfactual_logp" not in CausalLMPolicyConfig().capabilities().signals
    assert "prefix_rewards" in CausalLMPolicyConfig().capabilities().signals
    assert "counterfactual_logp" in policy.capabilities.signals
    with pytest.raises(ValueError, match="counterfactual_column is empty"):
        ProbeOptions(counterfactual_column="").validate()
    rows = [{"prompt": "1 + 2 =", "answer": "3", "plain": "1 2"}, {"prompt": "3 + 4 =", "answer": "7", "plain": "3 4"}]
    fields = frozenset({"prefix_rewards", "counterfactual_logp"})
    request = RolloutRequest(structure=fields, reward_probe=lambda rows, outputs: torch.ones(len(outputs)))
    rollout = policy.rollout(rows, group_size=2, request=request)
    assert rollout.structure["counterfactual_logp"].shape == rollout.action_mask.shape
    prefix = rollout.structure["prefix_rewards"]
    assert prefix.shape[0] == 4 and torch.all(prefix[:, 0] == 1.0)
