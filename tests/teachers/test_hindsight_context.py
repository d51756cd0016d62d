"""Hindsight context ([43] OpenClaw-RL's hindsight-guided OPD): a self-teacher whose context quotes the sample's own
output and reward (``{sample.completion}``, ``{sample.reward}``) scores the sample's tokens after seeing how it
turned out; the OPD gap is then the token-level directional advantage of the hindsight hint."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.logprobs import position_ids_from_mask
from genalign.teachers.config import TeacherConfig
from genalign.teachers.context import Template, with_sample_fields
from genalign.teachers.stage import TeacherStage

torch.set_num_threads(1)
ROWS = [{"prompt": "1+2=", "answer": "3"}, {"prompt": "2+2=", "answer": "4"}]
CONTEXT = " [{sample.reward}: {sample.completion}]"


def test_sample_fields_fill_the_template_per_sample():
    rows = with_sample_fields(ROWS, ["3", "5"], torch.tensor([[1.0, 0.5], [0.0, float("nan")]]))
    template = Template.parse(CONTEXT + " {sample.rewards}", "context", others=False)
    assert [template.render(row, row, "context") for row in rows] == [" [1: 3] 1, 0.5", " [0: 5] 0, nan"]
    with pytest.raises(ValueError, match="sample's own fields"):
        Template.parse("{sample.logits}", "context", others=False)


def test_hindsight_self_teacher_scores_after_the_samples_own_outcome():
    policy = build_policy(CausalLMPolicyConfig(model="builtin:arith-lm", max_new_tokens=3, temperature=1.0))
    torch.manual_seed(0)
    rollout = policy.rollout(ROWS, 2)
    config = TeacherConfig(source="self", weights="current", context=CONTEXT)
    stage = TeacherStage.build(config, frozenset({"teacher_action_logp"}), policy, batch_size=4)
    rewards = torch.tensor([[1.0], [0.0], [1.0], [0.0]])
    values = stage.judge(rollout, rewards=rewards)
    tokenizer, model = policy.tokenizer, policy.hf_model
    for i, row in enumerate(rollout.rows):
        keep = rollout.action_mask[i] > 0
        tokens = rollout.per_sample["completion_ids"][i][keep].tolist()
        hint = f" [{rewards[i, 0].item():g}: {rollout.outputs[i]}]"
        context = tokenizer.encode(row["prompt"] + hint)
        ids = torch.tensor([context + tokens])
        mask = torch.ones_like(ids)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits
        logp = logits[0, len(context) - 1 : -1].float().log_softmax(-1).gather(1, torch.tensor(tokens)[:, None])
        torch.testing.assert_close(values["teacher_action_logp"][i, : len(tokens)], logp.squeeze(1), atol=1e-5,
                                   rtol=0)  # fmt: skip
