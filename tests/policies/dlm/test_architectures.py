"""LLaDA-style and Dream-style masked diffusion LMs built tiny (genalign.policies.dlm.tiny): the bodies attend both
ways, Dream's shifted logits are re-aligned so that position ``j`` predicts token ``j``, and each style rolls out and
re-scores its own samples exactly."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.dlm.policy import DiffusionLMPolicyConfig, build_policy
from genalign.policies.dlm.tiny import DIFFUSION_STYLES, build_tiny_diffusion_lm

torch.set_num_threads(1)
ROWS = [{"prompt": "1 + 2 ="}, {"prompt": "what is 3 * 4 ?"}]


@pytest.fixture(scope="module")
def styles(tmp_path_factory):
    root = tmp_path_factory.mktemp("dlm-styles")
    return {style: build_tiny_diffusion_lm(root / style, style=style) for style in DIFFUSION_STYLES}


def make_policy(path, style: str):
    options = DIFFUSION_STYLES[style].policy_options()
    return build_policy(DiffusionLMPolicyConfig(model=str(path), gen_length=4, block_length=2, steps=4, **options))


def test_styles_declare_the_published_conventions():
    llada, dream = DIFFUSION_STYLES["llada"], DIFFUSION_STYLES["dream"]
    assert (llada.body, llada.shifted_logits, llada.mask_token_id) == ("llama", False, 126336)
    assert (dream.body, dream.shifted_logits, dream.mask_token_id) == ("qwen2", True, 151666)
    with pytest.raises(ValueError, match="style='mdlm' is not one of"):
        build_tiny_diffusion_lm("unused", style="mdlm")


@pytest.mark.parametrize("style", list(DIFFUSION_STYLES))
def test_stand_in_attends_both_ways_and_uses_its_mask_token(styles, style):
    policy = make_policy(styles[style], style)
    assert policy.mask_id == policy.tokenizer.convert_tokens_to_ids("<mask>") == 95
    assert policy.hf_model.config.model_type == DIFFUSION_STYLES[style].body
    fn = policy.model_fn(policy.model)
    a, b = torch.tensor([[5, 6, 7, 8, 9]]), torch.tensor([[5, 6, 7, 8, 10]])
    first = 1 if DIFFUSION_STYLES[style].shifted_logits else 0  # Dream's position 0 repeats raw position 0
    with torch.no_grad():
        assert not torch.allclose(fn(a, None)[0, first], fn(b, None)[0, first])  # an early position sees the last
        causal = policy.model(input_ids=a).logits, policy.model(input_ids=b).logits  # the body's own causal mask
    assert torch.equal(causal[0][0, 0], causal[1][0, 0])


def test_dream_logits_at_j_are_the_bodys_logits_at_j_minus_one(styles):
    from genalign.policies.dlm.policy import bidirectional_attention_bias

    policy = make_policy(styles["dream"], "dream")
    ids, mask = torch.tensor([[0, 5, 95, 95, 9]]), torch.tensor([[0, 1, 1, 1, 1]])
    with torch.no_grad():
        bias = bidirectional_attention_bias(ids, mask, dtype=torch.float32)
        raw = policy.model(input_ids=ids, attention_mask=bias).logits.float()  # [1, 5, V]
        aligned = policy.model_fn(policy.model)(ids, mask)
    assert torch.equal(aligned[:, 1:], raw[:, :-1]) and torch.equal(aligned[:, 0], raw[:, 0])


@pytest.mark.parametrize("style", list(DIFFUSION_STYLES))
def test_each_style_re_scores_its_rollout_with_ratio_one(styles, style):
    policy = make_policy(styles[style], style)
    rollout = policy.rollout(ROWS, group_size=2)
    with torch.no_grad():
        policy.on_inner_epoch(0)
        rescored = policy.score(rollout).logp
    assert rollout.old_logp.shape == (4, 4)
    torch.testing.assert_close(rescored, rollout.old_logp, atol=1e-5, rtol=0)
