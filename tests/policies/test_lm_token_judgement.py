"""The causal-LM family's ``token_judgement`` probe (:func:`genalign.policies.lm.probes.token_judgement`): the
configured token judge's spans land on the tokens that hold them, over several votes, and a rollout request fills it."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.base import Rollout, RolloutRequest
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.options import TokenJudgeOptions
from genalign.policies.lm.probes import (
    ProbeOptions,
    constraint_relevance,
    probe_structure,
    token_judgement,
    token_pieces,
)
from genalign.registry import Option

torch.set_num_threads(1)


def judged_policy(**judge):
    probes = ProbeOptions(token_judge=TokenJudgeOptions(**judge))
    return build_policy(CausalLMPolicyConfig(model="builtin:arith-lm", max_new_tokens=8, probes=probes))


@pytest.fixture(scope="module")
def policy():
    return judged_policy(judge=Option("arithmetic_claims"), votes=3)


def hand_rollout(policy, completions: list[str]) -> Rollout:
    """A rollout of chosen character-level completions, each closed by EOS, right-padded."""
    tok = policy.tokenizer
    ids = [[*tok.encode(c, add_special_tokens=False), policy.eos_token_ids[0]] for c in completions]
    width = max(len(i) for i in ids)
    completion_ids = torch.tensor([i + [policy.pad_token_id] * (width - len(i)) for i in ids])
    mask = torch.tensor([[1.0] * len(i) + [0.0] * (width - len(i)) for i in ids])
    prompt_ids = torch.tensor([tok.encode("1+1=", add_special_tokens=False)] * len(completions))
    return Rollout(
        rows=[{"prompt": "1+1=", "answer": "2"} for _ in completions], outputs=completions,
        group_ids=torch.zeros(len(completions), dtype=torch.long), old_logp=torch.zeros(mask.shape),
        action_mask=mask,
        per_sample={"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids),
                    "completion_ids": completion_ids, "completion_mask": mask},
    )  # fmt: skip


def test_the_judged_spans_land_on_their_tokens(policy):
    rollout = hand_rollout(policy, ["2+2=5 1+1=2", "3-1=2"])
    texts = token_pieces(policy.tokenizer, rollout.per_sample["completion_ids"], rollout.action_mask)
    assert texts[0] == ("2+2=5 1+1=2", [*range(1, 12), 11])  # one character per token; EOS decodes to ""
    judged = token_judgement(policy, rollout)
    wrong = [-1.0] * 5 + [0.0] * 7  # "2+2=5" is wrong, " 1+1=2" and the EOS are not
    torch.testing.assert_close(judged, torch.tensor([wrong, [0.0] * 12]))


def test_a_step_judge_marks_the_whole_line_and_votes_combine():
    policy = judged_policy(judge=Option("arithmetic_claims", {"scope": "step", "penalty": 2.0}), votes=2, vote="mean")
    judged = token_judgement(policy, hand_rollout(policy, ["1+2=4 3+3=6"]))
    torch.testing.assert_close(judged, torch.tensor([[-2.0] * 11 + [0.0]]))  # one line: one step; EOS unjudged


def test_a_rollout_request_fills_the_signal_only_when_asked(policy):
    rollout = probe_structure(policy, hand_rollout(policy, ["9-9=1"]), RolloutRequest(structure={"token_judgement"}))
    torch.testing.assert_close(rollout.structure["token_judgement"], torch.tensor([[-1.0] * 5 + [0.0]]))
    assert "token_judgement" in policy.capabilities.signals
    assert "token_judgement" not in judged_policy().capabilities.signals  # no judge configured


def test_relevance_judges_mark_each_constraints_tokens():
    judges = [Option("keyword_spans", {"column": "answer"}), Option("keyword_spans", {"pattern": "[+]"})]
    probes = ProbeOptions(relevance_judges=judges)
    policy = build_policy(CausalLMPolicyConfig(model="builtin:arith-lm", max_new_tokens=8, probes=probes))
    relevance = constraint_relevance(policy, hand_rollout(policy, ["1+2=2"]))  # answer "2"
    torch.testing.assert_close(relevance[0, :, 0], torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 0.0]))
    torch.testing.assert_close(relevance[0, :, 1], torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0, 0.0]))
    assert "constraint_relevance" in policy.capabilities.signals
