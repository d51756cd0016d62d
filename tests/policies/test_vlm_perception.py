"""The VLM family's perception features (``logp_without_image`` for VPPO [329], ``visual_similarity`` for PEPO
[129]) and text blocks (``block_ids`` for SD-GRPO [175]) on the embedded ``builtin:shapes-vlm``, and their way through
the trainer's scoring pass before the update into the credit rules."""

from __future__ import annotations

import math
import os
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from genalign.data.vlm_tasks import shapes_vqa_rows
from genalign.policies.base import RolloutRequest, ScoreRequest
from genalign.policies.lm.probes import block_ids
from genalign.policies.vlm import VLMPolicyConfig, build_policy
from genalign.trainer.rewards import RewardSet
from tests.step_batches import step_batch

torch.set_num_threads(1)
SHAPES = {"kinds": ["count"], "colors": ["red", "green", "blue"], "shape_kinds": ["circle", "square"]}
ANSWERED = re.compile(r"^<think>.*</think><answer>\d</answer>$")


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return build_policy(VLMPolicyConfig(max_new_tokens=24, min_pixels=256, max_pixels=2304), "cpu")


@pytest.fixture(scope="module")
def rollout(policy):
    return policy.rollout(shapes_vqa_rows(3, seed=0, **SHAPES), group_size=2)


def test_logp_without_image_differs_only_on_the_image_dependent_answer(policy, rollout):
    with torch.no_grad():
        plain = policy.score(rollout).logp
        out = policy.score(rollout, ScoreRequest.of("logp_without_image", "visual_similarity"))
    mask = rollout.action_mask
    assert torch.equal(out.logp, plain)  # the features do not change the log-probs (same pass, same values)
    for feature in (out["logp_without_image"], out["visual_similarity"]):
        assert feature.shape == mask.shape and feature.dtype == torch.float32
        assert torch.all(feature[mask == 0] == 0) and not feature.requires_grad
    change = (out["logp_without_image"] - out.logp).abs()  # [n, T]
    answered = [i for i, text in enumerate(rollout.outputs) if ANSWERED.match(text)]
    assert len(answered) >= 4, rollout.outputs
    at_digit = []
    for i in answered:
        pieces = [policy.tokenizer.decode([t]) for t in rollout.per_sample["completion_ids"][i].tolist()]
        digit = next(t for t, piece in enumerate(pieces) if piece.isdigit())  # the count after "<answer>"
        # counting needs the image; the format and the question's words do not (their change is float noise)
        assert change[i].argmax().item() == digit and change[i, digit] > 1e-3
        assert change[i, :digit].max() < 1e-4
        at_digit.append(change[i, digit].item())
    assert max(at_digit) > 0.1
    # micro-batches give the same features (the trainer's scoring pass splits the batch)
    with torch.no_grad():
        parts = [
            policy.score(rollout.select(idx), ScoreRequest.of("logp_without_image")) for idx in ([0, 1], [2, 3, 4, 5])
        ]
    torch.testing.assert_close(
        torch.cat([p["logp_without_image"] for p in parts]), out["logp_without_image"], atol=1e-6, rtol=0
    )


def test_visual_similarity_is_the_layer_mean_cosine_to_the_image_tokens(policy, rollout):
    sample = rollout.select([0])
    with torch.no_grad():
        feature = policy.score(sample, ScoreRequest.of("visual_similarity"))["visual_similarity"][0]  # [T]
        inputs = policy.model_inputs(sample)
        layers = policy.hf_model(**inputs, output_hidden_states=True, use_cache=False).hidden_states
    width = sample.per_sample["prompt_ids"].shape[1]
    image = (inputs["input_ids"][0] == policy.hf_model.config.image_token_id).nonzero().flatten()
    assert image.numel() == 16  # 48 x 48 image: 16 merged image tokens
    for t in range(int(sample.action_mask.sum())):
        naive = sum(
            torch.nn.functional.cosine_similarity(h[0, width + t][None], h[0, image], dim=-1).mean() for h in layers
        ) / len(layers)
        assert feature[t].item() == pytest.approx(naive.item(), abs=1e-5)


def test_text_only_rows_have_no_visual_signal(policy):
    rows = [{"prompt": "How many red circles are there?", "image": None}, shapes_vqa_rows(1, seed=3, **SHAPES)[0]]
    rollout = policy.rollout(rows, group_size=2)
    with torch.no_grad():
        out = policy.score(rollout, ScoreRequest.of("logp_without_image", "visual_similarity"))
    assert torch.all(out["visual_similarity"][:2] == 0)
    torch.testing.assert_close(out["logp_without_image"][:2], out.logp[:2], atol=1e-5, rtol=0)


def test_rollout_fills_block_ids_from_the_markers():
    policy = build_policy(
        VLMPolicyConfig(max_new_tokens=24, min_pixels=256, max_pixels=2304, block_markers=["<answer>"]), "cpu"
    )
    rows = shapes_vqa_rows(2, seed=0, **SHAPES)
    assert "block_ids" not in policy.rollout(rows, group_size=2).structure
    rollout = policy.rollout(rows, group_size=2, request=RolloutRequest(structure=frozenset({"block_ids"})))
    blocks = rollout.structure.get("block_ids")
    completions = rollout.per_sample["completion_ids"]
    assert torch.equal(blocks, block_ids(policy.tokenizer, completions, rollout.action_mask, ["<answer>"]))
    answered = [i for i, text in enumerate(rollout.outputs) if ANSWERED.match(text)]
    assert answered, rollout.outputs
    for i in answered:
        pieces = [policy.tokenizer.decode([t]) for t in completions[i].tolist()]
        first = pieces.index("answer") - 1  # "<answer>" is split as "<", "answer", ">": its block opens at "<"
        assert blocks[i, :first].eq(0).all() and blocks[i, first:].eq(1).all()  # padding continues the last block


def _config(credit: list) -> TrainConfig:
    return from_dict(
        TrainConfig,
        {
            "policy": {"family": "vlm", "model": "builtin:shapes-vlm", "max_new_tokens": 24},
            "data": {"train": {"source": "procedural:shapes_vqa", "args": {"size": 8, "seed": 0, **SHAPES}}},
            "rewards": [{"fn": "count_accuracy", "name": "accuracy"}],
            "algorithm": {"group_size": 2, "credit": credit, "micro_batch_size": 4},
        },
    )


def test_the_scoring_pass_before_the_update_feeds_the_vlm_credit_rules(policy, rollout):
    config = _config([{"name": "visual_dependency", "top_fraction": 0.2}, "perception_prior"])
    request = config.algorithm.advantage_stage().prepass()
    assert (
        "logp_without_image" in request
        and "visual_similarity" in request
        and "entropy" in request
        and "hidden" not in request
    )
    rewards = RewardSet(config.rewards)
    table, _ = rewards(rollout.rows, rollout.outputs)
    batch, _ = step_batch(policy, rollout, table, rewards.weights, config.algorithm, progress=0.5)
    advantages, mask = batch["advantages"], rollout.action_mask
    assert advantages.shape == mask.shape
    for i in range(len(rollout)):
        if batch["sample_advantages"][i] != 0:  # token filtering: at most ⌈0.2·|o_i|⌉ actions keep a gradient
            trained = int((advantages[i] != 0).sum())
            assert 1 <= trained <= math.ceil(0.2 * int(mask[i].sum()))
