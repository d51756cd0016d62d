"""Rollout-time probes of the causal-LM family (:mod:`genalign.policies.lm.probes`): the self-teacher log-probs, the
reference-answer probe at every segment state and the block ids equal direct computations through the full logits;
the Monte-Carlo segment values continue from the right prefixes; a rollout fills what the request names."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.algorithms.scores import ScoreRequest
from genalign.policies.base import Rollout, RolloutRequest
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.logprobs import position_ids_from_mask
from genalign.policies.lm.probes import (
    ProbeOptions,
    answer_probe,
    block_ids,
    hinted_row,
    left_pad,
    segment_ends,
    segment_values,
    teacher_logprobs,
)
from genalign.policies.lm.tiny import build_tiny_causal_lm

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    path = build_tiny_causal_lm(tmp_path_factory.mktemp("probe_model"), architecture="qwen2", vocab_size=96)
    probes = ProbeOptions(answer_prefix=" answer is ", teacher_hint=" the answer is {answer}", value_samples=3)
    return build_policy(CausalLMPolicyConfig(model=str(path), max_new_tokens=6, temperature=0.8, probes=probes))


def hand_rollout(policy, prompts: list[str], completions: list[str], answers: list[str]) -> Rollout:
    """A rollout with chosen completions (one group per two samples)."""
    tok = policy.tokenizer
    prompt_ids, prompt_mask = left_pad([tok.encode(p, add_special_tokens=False) for p in prompts], policy.pad_token_id)
    ids = [[*tok.encode(c, add_special_tokens=False), policy.eos_token_ids[0]] for c in completions]
    width = max(len(i) for i in ids)
    completion_ids = torch.tensor([i + [policy.pad_token_id] * (width - len(i)) for i in ids])
    mask = torch.tensor([[1.0] * len(i) + [0.0] * (width - len(i)) for i in ids])
    return Rollout(
        rows=[{"prompt": p, "answer": a} for p, a in zip(prompts, answers, strict=True)],
        outputs=completions,
        group_ids=torch.arange(len(prompts)) // 2,
        old_logp=torch.zeros(mask.shape),
        action_mask=mask,
        per_sample={"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
                    "completion_mask": mask},
    )  # fmt: skip


def full_logits_scores(policy, context: list[int], target: list[int], temperature: float):
    """Log-probs and entropies of ``target`` after ``context`` through the full ``[1, L, V]`` logits."""
    ids = torch.tensor([context + target])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        logits = policy.hf_model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits
    logp = (logits[0, len(context) - 1 : -1].float() / temperature).log_softmax(-1)  # [L, V]
    return logp.gather(1, torch.tensor(target)[:, None]).squeeze(1), -(logp.exp() * logp).sum(-1)


def test_segment_ends_and_left_pad():
    segments = torch.tensor([[0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 1, 1]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    assert segment_ends(segments, mask) == [[0, 2, 4, 6], [0, 1, 3]]  # state k = the first b_k tokens
    ids, pad_mask = left_pad([[7, 8], [9]], 0)
    assert ids.tolist() == [[7, 8], [0, 9]] and pad_mask.tolist() == [[1, 1], [0, 1]]


def test_block_ids_count_the_markers_found_in_order(policy):
    tok = policy.tokenizer
    ids = torch.tensor([tok.encode("1 2 : 9 ; 3 ;", add_special_tokens=False)])
    mask = torch.ones(ids.shape)
    assert block_ids(tok, ids, mask, [":", ";"]).tolist() == [[0, 0, 1, 1, 2, 2, 2]]
    assert block_ids(tok, ids, mask, [";", ":"]).tolist() == [[0, 0, 0, 0, 1, 1, 1]]  # ':' after ';' never comes


def test_teacher_logprobs_equal_the_completion_scored_after_the_hinted_prompt(policy):
    rollout = hand_rollout(policy, ["1 + 2 =", "3 + 4 ="], ["3 .", "7 . 7"], ["3", "7"])
    teacher = teacher_logprobs(policy, rollout)
    tok = policy.tokenizer
    for i, (prompt, answer) in enumerate([("1 + 2 =", "3"), ("3 + 4 =", "7")]):
        context = tok(f"{prompt} the answer is {answer}")["input_ids"]  # the hint inside the rendered prompt
        target = rollout.per_sample["completion_ids"][i][rollout.action_mask[i] > 0].tolist()
        logp, _ = full_logits_scores(policy, context, target, temperature=0.8)
        torch.testing.assert_close(teacher[i, : len(target)], logp, atol=1e-5, rtol=0)
        assert torch.all(teacher[i, len(target) :] == 0)


def test_the_hint_goes_into_the_prompt_text_or_the_last_user_message():
    assert hinted_row({"prompt": "q", "answer": 1}, " (1)") == {"prompt": "q (1)", "answer": 1}
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert hinted_row({"prompt": chat}, " (1)")["prompt"][1] == {"role": "user", "content": "q (1)"}
    assert chat[1]["content"] == "q"  # the rollout's rows are not modified


def test_answer_probe_teacher_forces_the_answer_at_every_segment_state(policy):
    rollout = hand_rollout(policy, ["1 + 2 =", "3 + 4 ="], ["3 . 3 .", "7"], ["3", "4 2"])
    segments = policy.segments(rollout.per_sample["completion_ids"], rollout.action_mask)
    probe = answer_probe(policy, rollout, segments)
    tok = policy.tokenizer
    prefix = tok.encode(" answer is ", add_special_tokens=False)
    ends = segment_ends(segments, rollout.action_mask)
    assert ends == [[0, 2, 4, 5], [0, 2]]  # "3 ." | "3 ." | <eos>;  "7 <eos>" is one segment
    assert probe.shape == (2, 4, 3) and torch.isnan(probe[1, 2:]).all()
    for i, answer in enumerate(["3", "4 2"]):
        completion = rollout.per_sample["completion_ids"][i].tolist()
        target = tok.encode(answer, add_special_tokens=False)
        for k, b in enumerate(ends[i]):
            context = rollout.per_sample["prompt_ids"][i][rollout.per_sample["prompt_mask"][i] > 0].tolist()
            logp, entropy = full_logits_scores(policy, context + completion[:b] + prefix, target, temperature=1.0)
            expected = torch.stack([logp.sum(), logp.exp().mean(), entropy.mean()])
            torch.testing.assert_close(probe[i, k], expected, atol=1e-5, rtol=1e-5)


def test_segment_values_continue_from_each_inner_state(policy):
    rollout = hand_rollout(policy, ["1 + 2 =", "1 + 2 ="], ["3 . 3 .", "4"], ["3", "3"])
    segments = policy.segments(rollout.per_sample["completion_ids"], rollout.action_mask)
    seen = []

    def reward(rows, outputs):
        seen.extend(outputs)
        return torch.tensor([float(len(o)) for o in outputs])  # deterministic in the text

    values = segment_values(policy, rollout, segments, reward)
    own = [len("3 . 3 ."), len("4")]
    # states: sample 0 has 3 segments ("3 ." | "3 ." | <eos>), sample 1 one; state 0 = the group mean of own rewards
    assert values[0, 0].item() == values[1, 0].item() == pytest.approx(sum(own) / 2)
    assert values[0, 3].item() == own[0] and values[1, 1].item() == own[1] and torch.isnan(values[1, 2:]).all()
    continuations = seen[2:]  # the first call scores the rollout's own outputs
    assert len(continuations) == 2 * 3  # inner states 1 and 2 of sample 0, three continuations each
    assert all(text.startswith("3 .") for text in continuations[:3])
    assert all(text.startswith("3 . 3 .") for text in continuations[3:])
    assert values[0, 1].item() == pytest.approx(sum(len(t) for t in continuations[:3]) / 3)


def test_a_rollout_fills_the_requested_probe_fields(policy):
    rows = [{"prompt": "1 + 2 =", "answer": "3"}, {"prompt": "3 + 4 =", "answer": "7"}]
    fields = frozenset({"teacher_logp", "answer_probe", "segment_values", "action_ids"})
    request = RolloutRequest(structure=fields, reward_probe=lambda rows, outputs: torch.zeros(len(outputs)))
    rollout = policy.rollout(rows, group_size=2, request=request)
    structure = rollout.structure
    assert fields <= set(structure)
    assert structure["teacher_logp"].shape == rollout.action_mask.shape
    assert structure["answer_probe"].shape[0] == 4 and structure["answer_probe"].shape[2] == 3
    assert torch.equal(structure["action_ids"], rollout.per_sample["completion_ids"] * (rollout.action_mask > 0))
    assert torch.equal(structure["segment_values"].nan_to_num(0.0), torch.zeros_like(structure["segment_values"]))
    assert rollout.select([1]).structure.get("answer_probe").shape[0] == 1
    with pytest.raises(ValueError, match="answer_column"):
        policy.rollout(
            [{"prompt": "1 + 2 ="}], group_size=2, request=RolloutRequest(structure=frozenset({"teacher_logp"}))
        )


def test_logit_stats_feature_equals_the_full_logits(policy):
    """``ScoreRequest.of("logit_stats")`` (UCAS [210]): self-certainty at the sampling temperature and the raw logit."""
    rollout = hand_rollout(policy, ["1 + 2 =", "3 + 4 ="], ["3 .", "7 . 7"], ["3", "7"])
    out = policy.score(rollout, ScoreRequest.of("logit_stats"))
    assert out["logit_stats"].shape == (*rollout.action_mask.shape, 2) and not out["logit_stats"].requires_grad
    data = rollout.per_sample
    for i in range(2):
        context = data["prompt_ids"][i][data["prompt_mask"][i] > 0].tolist()
        target = data["completion_ids"][i][rollout.action_mask[i] > 0].tolist()
        ids = torch.tensor([context + target])
        with torch.no_grad():
            logits = policy.hf_model(input_ids=ids).logits[0, len(context) - 1 : -1].float()  # [L, V]
        scaled = logits / 0.8
        certainty = torch.logsumexp(scaled, -1) - scaled.mean(-1)
        raw = logits.gather(1, torch.tensor(target)[:, None]).squeeze(1)
        torch.testing.assert_close(
            out["logit_stats"][i, : len(target)], torch.stack([certainty, raw], 1), atol=1e-4, rtol=1e-5
        )
        assert torch.all(out["logit_stats"][i, len(target) :] == 0)
