"""Rollout-time readings of a causal LM's internals (:mod:`genalign.policies.lm.internals`): attention entropy,
attention-rollout flow to the answer and gradient saliency, against hand-computed maps and direct computations."""

from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.base import Rollout, RolloutRequest
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.internals import (
    answer_positions,
    attention_rollout,
    internal_structure,
    mean_attention_entropy,
)
from genalign.policies.lm.probes import ProbeOptions, probe_structure

torch.set_num_threads(1)
FIELDS = {"attention_entropy", "answer_attention_flow", "answer_saliency"}


@pytest.fixture(scope="module")
def policy():
    probes = ProbeOptions(answer_tokens=2, batch_size=1)
    return build_policy(CausalLMPolicyConfig(model="builtin:arith-lm", max_new_tokens=8, probes=probes))


def hand_rollout(policy, completions: list[str]) -> Rollout:
    tok = policy.tokenizer
    ids = [[*tok.encode(c, add_special_tokens=False), policy.eos_token_ids[0]] for c in completions]
    width = max(len(i) for i in ids)
    completion_ids = torch.tensor([i + [policy.pad_token_id] * (width - len(i)) for i in ids])
    mask = torch.tensor([[1.0] * len(i) + [0.0] * (width - len(i)) for i in ids])
    prompt_ids = torch.tensor([[policy.pad_token_id, *tok.encode("3+4=", add_special_tokens=False)]] * len(ids))
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_mask[:, 0] = 0  # a left-padded prompt
    return Rollout(
        rows=[{"prompt": "3+4="}] * len(ids), outputs=completions, group_ids=torch.zeros(len(ids), dtype=torch.long),
        old_logp=torch.zeros(mask.shape), action_mask=mask,
        per_sample={"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
                    "completion_mask": mask},
    )  # fmt: skip


def test_attention_entropy_and_rollout_of_hand_maps():
    heads = torch.tensor([[[1.0, 0.0], [0.5, 0.5]], [[1.0, 0.0], [0.0, 1.0]]])  # [heads, L, L]: mean [[1, 0], [¼, ¾]]
    maps = (heads[None], heads[None])  # two identical layers, B = 1
    entropy = mean_attention_entropy(maps, torch.ones(1, 2))
    torch.testing.assert_close(entropy, torch.tensor([[0.0, math.log(2) / 2]]))  # row 1: ln 2 and 0 over the heads
    # Ã = ½(mean + I) = [[1, 0], [⅛, ⅞]]; R = Ã·Ã = [[1, 0], [⅛ + ⅞·⅛, ⅞·⅞]]: rows keep summing to 1
    torch.testing.assert_close(attention_rollout(maps), torch.tensor([[[1.0, 0.0], [0.234375, 0.765625]]]))


def test_the_answer_region_skips_the_trailing_special_tokens(policy):
    rollout = hand_rollout(policy, ["12+3", "7"])
    region = answer_positions(policy.tokenizer, rollout.per_sample["completion_ids"], rollout.action_mask, 2)
    assert region.tolist() == [[False, False, True, True, False], [True, False, False, False, False]]


def test_the_readings_equal_direct_computations(policy):
    rollout = hand_rollout(policy, ["12+3", "7"])
    values = internal_structure(policy, rollout, set(FIELDS))
    model, mask = policy.model, rollout.action_mask
    assert model.config._attn_implementation == "sdpa"  # switched to eager for the pass, and back
    ids = torch.cat([rollout.per_sample["prompt_ids"], rollout.per_sample["completion_ids"]], 1)
    attention = torch.cat([rollout.per_sample["prompt_mask"], mask.long()], 1)
    positions = (attention.cumsum(1) - 1).clamp_min(0)
    model.set_attn_implementation("eager")
    with torch.no_grad():
        maps = model(input_ids=ids, attention_mask=attention, position_ids=positions, output_attentions=True).attentions
    model.set_attn_implementation("sdpa")
    prompt = ids.shape[1] - mask.shape[1]  # 5
    # entropy of the position predicting action t of sample 0, averaged over layers and heads
    direct = sum(-torch.special.xlogy(m[0], m[0]).sum(-1).mean(0) for m in maps) / len(maps)  # [L]
    torch.testing.assert_close(values["attention_entropy"][0], direct[prompt - 1 : prompt + 4], rtol=1e-4, atol=1e-5)
    flow = attention_rollout(tuple(m.float() for m in maps))[0]  # [L, L]
    answer_rows = flow[[prompt + 2, prompt + 3]].mean(0)  # the answer "+3" of sample 0
    torch.testing.assert_close(values["answer_attention_flow"][0], answer_rows[prompt:], rtol=1e-4, atol=1e-6)
    # saliency: d log π("+3" | ...) / d embeddings, times the embeddings
    embeddings = model.get_input_embeddings()(ids[:1]).detach().requires_grad_(True)
    logits = model(inputs_embeds=embeddings, attention_mask=attention[:1], position_ids=positions[:1]).logits[0]
    logp = torch.log_softmax(logits.float(), -1)
    answer = logp[prompt + 1, ids[0, prompt + 2]] + logp[prompt + 2, ids[0, prompt + 3]]
    (gradient,) = torch.autograd.grad(answer, embeddings)
    saliency = (gradient * embeddings).sum(-1).abs()[0, prompt:]
    torch.testing.assert_close(values["answer_saliency"][0], saliency.detach(), rtol=1e-3, atol=1e-6)
    assert values["answer_saliency"][0, 3:].abs().sum() == 0 and values["answer_saliency"][0, :2].abs().sum() > 0
    assert all(p.grad is None for p in model.parameters())  # no parameter gradient is kept
    assert torch.all(values["attention_entropy"][mask == 0] == 0)


def test_a_rollout_request_fills_the_readings(policy):
    assert policy.capabilities.signals >= FIELDS
    rollout = probe_structure(policy, hand_rollout(policy, ["5"]), RolloutRequest(structure=frozenset(FIELDS)))
    assert {name: tuple(rollout.structure[name].shape) for name in FIELDS} == dict.fromkeys(FIELDS, (1, 2))
