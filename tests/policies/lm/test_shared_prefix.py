"""Shared-prefix scoring ([58], [50]): each distinct prompt encoded once, same log-probs, features and gradients."""

from __future__ import annotations

import pytest
import torch

from genalign.policies.base import ScoreRequest
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.shared_prefix import distinct_prompts
from genalign.policies.lm.tiny import build_tiny_causal_lm

torch.set_num_threads(1)
PROMPTS = [{"prompt": "1 + 2 ="}, {"prompt": "what is 3 * 4 ? answer :"}, {"prompt": "a b c"}]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {arch: build_tiny_causal_lm(root / arch, architecture=arch, vocab_size=96) for arch in ("qwen2", "llama")}


def _policy(model_dirs, arch: str, shared: bool):
    config = CausalLMPolicyConfig(model=str(model_dirs[arch]), max_new_tokens=6, temperature=0.8)
    config.shared_prefix_scoring = shared
    return build_policy(config, "cpu")


def _embedded_tokens(policy) -> list[int]:
    """Counts the tokens the backbone's embedding layer sees, one entry per call."""
    counts: list[int] = []
    policy.hf_model.get_input_embeddings().register_forward_hook(lambda _m, args, _o: counts.append(args[0].numel()))
    return counts


def test_distinct_prompts_by_hand():
    ids = torch.tensor([[0, 5, 6], [7, 8, 9], [0, 5, 6], [0, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1], [1, 1, 1]])  # row 3: same ids, different mask
    unique_ids, unique_mask, inverse = distinct_prompts(ids, mask)
    assert unique_ids.shape == (3, 3)
    assert torch.equal(unique_ids[inverse], ids) and torch.equal(unique_mask[inverse], mask)
    assert inverse[0] == inverse[2] and len({int(inverse[0]), int(inverse[1]), int(inverse[3])}) == 3


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_shared_prefix_scores_equal_the_plain_pass_with_the_same_gradients(model_dirs, arch):
    plain, shared = _policy(model_dirs, arch, False), _policy(model_dirs, arch, True)
    shared.model.load_state_dict(plain.model.state_dict())
    rollout = plain.rollout(PROMPTS, group_size=3)
    request = ScoreRequest.of("entropy", "hidden")
    expected, got = plain.score(rollout, request), shared.score(rollout, request)
    torch.testing.assert_close(got.logp, expected.logp, atol=1e-5, rtol=0)
    for name in ("entropy", "hidden"):
        torch.testing.assert_close(got.features[name], expected.features[name], atol=1e-5, rtol=1e-5)
    weights = torch.randn_like(expected.logp)
    (expected.logp * weights).sum().backward()
    (got.logp * weights).sum().backward()
    pairs = zip(plain.trainable_parameters(), shared.trainable_parameters(), strict=True)
    for a, b in pairs:
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4)
    # Micro-batch invariance, including a split that cuts a group in two.
    with torch.no_grad():
        pieces = torch.cat([shared.score(rollout.select(idx)).logp for idx in ([0, 1], [2, 3, 4, 5, 6], [7, 8])])
    torch.testing.assert_close(pieces, got.logp.detach(), atol=1e-6, rtol=0)


def test_each_distinct_prompt_is_encoded_once(model_dirs):
    plain, shared = _policy(model_dirs, "qwen2", False), _policy(model_dirs, "qwen2", True)
    rollout = plain.rollout(PROMPTS, group_size=4)
    prompt_width = rollout.per_sample["prompt_ids"].shape[1]
    completion_width = int(rollout.per_sample["completion_mask"].any(dim=0).sum())
    plain_counts, shared_counts = _embedded_tokens(plain), _embedded_tokens(shared)
    with torch.no_grad():
        plain.score(rollout)
        shared.score(rollout)
    assert plain_counts == [12 * (prompt_width + completion_width)]
    # the 3 prompts once, then the 12 completions without their last token (it predicts nothing)
    assert shared_counts == [3 * prompt_width, 12 * (completion_width - 1)]


def test_gradient_checkpointing_is_refused_with_the_fix():
    config = CausalLMPolicyConfig(shared_prefix_scoring=True, gradient_checkpointing=True)
    with pytest.raises(ValueError, match=r"policy\.shared_prefix_scoring=true .* policy\.gradient_checkpointing"):
        config.validate()
