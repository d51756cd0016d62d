"""LaSeR's test-time use [208] (:func:`genalign.pipelines.self_reward.self_reward_scores`, :func:`best_of_n`): the score
of each completion equals β·(log π(z) − c) read by hand from an unpadded forward at the position that predicted the
completion's last token, and best-of-n keeps each prompt's highest score."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.pipelines.self_reward import best_of_n, self_reward_scores
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy

torch.set_num_threads(1)


def test_the_score_is_read_where_the_last_token_was_predicted():
    model = build_policy(CausalLMPolicyConfig(model="builtin:arith-lm", max_new_tokens=4)).model.eval()
    prompts, completions = [[4, 13, 5, 16], [4, 5, 13, 6, 7, 16]], [[7, 1], [8, 9, 1]]  # arith ids; 1 = EOS
    width, length = max(map(len, prompts)), max(map(len, completions))
    prompt_ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    prompt_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    completion_ids = torch.tensor([c + [0] * (length - len(c)) for c in completions])
    completion_mask = torch.tensor([[1] * len(c) + [0] * (length - len(c)) for c in completions])
    got = self_reward_scores(model, prompt_ids, prompt_mask, completion_ids, completion_mask, token_id=3,
                             reference_logp=-5.0, beta=0.5)  # fmt: skip
    with torch.no_grad():  # by hand: each sequence alone, the distribution before its EOS
        expected = []
        for prompt, completion in zip(prompts, completions, strict=True):
            logits = model(input_ids=torch.tensor([prompt + completion])).logits[0]  # [S, V]
            expected.append(0.5 * (torch.log_softmax(logits[len(prompt) + len(completion) - 2], -1)[3] + 5.0))
    torch.testing.assert_close(got, torch.stack(expected), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="token_id=999 is outside"):
        self_reward_scores(model, prompt_ids, prompt_mask, completion_ids, completion_mask, token_id=999,
                           reference_logp=-5.0, beta=0.5)  # fmt: skip


def test_best_of_n_keeps_each_prompts_highest_score():
    scores = torch.tensor([0.1, 0.7, 0.3, -1.0, 2.0, 2.0])
    assert best_of_n(scores, 3).tolist() == [1, 4]
    with pytest.raises(ValueError, match="do not split into groups of n=4"):
        best_of_n(scores, 4)
