"""Sem-DPO [51] against hand-computed values: DPO's loss of each group pair scaled by ``exp(−α(1 − s_w))`` of the
winner's prompt similarity (a reward column), the weight a constant of the gradient; and the hashed n-gram similarity
reward it reads (``prompt_similarity``)."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import OBJECTIVES, ScoreOutput, StepBatch
from genalign.rewards import REWARDS
from genalign.rewards.semantic import cosine, hashed_ngram_embedding
from tests.algorithms.test_objectives_preference import aggregated, close, sigmoid, softplus


def sem_dpo(logp, ref, rewards, similarity, group_ids, **hp):
    logp = torch.tensor(logp, dtype=torch.float64, requires_grad=True)
    table = torch.tensor([[r, s] for r, s in zip(rewards, similarity, strict=True)], dtype=torch.float64)  # [n, 2]
    batch = StepBatch(mask=torch.ones_like(logp), group_ids=torch.tensor(group_ids),
                      combined_reward=table[:, 0], rewards=table, ref_logp=torch.tensor(ref, dtype=torch.float64))  # fmt: skip
    loss, metrics = OBJECTIVES.get("sem_dpo")(ScoreOutput(logp=logp), torch.zeros(len(rewards)), batch, **hp)
    return logp, loss, metrics


def test_each_pair_is_weighted_by_the_winners_semantic_distance_from_the_prompt():
    # group 0: samples 0 > 1 (winner similarity 0.8); group 1: samples 3 > 2 (winner similarity 0.2)
    logp = [[-1.0], [-2.0], [-1.5], [-0.5]]
    ref = [[-1.5], [-1.5], [-1.0], [-1.0]]
    logp_t, loss, metrics = sem_dpo(logp, ref, [1.0, 0.0, 0.0, 1.0], [0.8, 0.1, 0.9, 0.2], [0, 0, 1, 1],
                                    beta=0.5, alpha=2.0)  # fmt: skip
    z0 = 0.5 * ((-1.0 + 1.5) - (-2.0 + 1.5))  # 0.5
    z1 = 0.5 * ((-0.5 + 1.0) - (-1.5 + 1.0))  # 0.5
    w0, w1 = math.exp(-2.0 * 0.2), math.exp(-2.0 * 0.8)
    mask = torch.ones(4, 1, dtype=torch.float64)
    close(aggregated(loss, mask), (w0 * softplus(-z0) + w1 * softplus(-z1)) / 2)  # mean over the groups
    close(metrics["sem_dpo/weight"], (w0 + w1) / 2)
    aggregated(loss, mask).backward()
    # d/dlogp_w = −W·β·σ(−z)/2 (each group weighs ½); the weight carries no gradient (a reward)
    close(logp_t.grad, [[-w0 * 0.5 * sigmoid(-z0) / 2], [w0 * 0.5 * sigmoid(-z0) / 2],
                        [w1 * 0.5 * sigmoid(-z1) / 2], [-w1 * 0.5 * sigmoid(-z1) / 2]])  # fmt: skip


def test_alpha_zero_is_dpo_and_a_missing_similarity_is_the_largest_distance():
    logp, ref = [[-1.0], [-2.0]], [[-1.5], [-1.5]]
    _, sem, _ = sem_dpo(logp, ref, [1.0, 0.0], [0.3, 0.9], [0, 0], alpha=0.0)
    plain = OBJECTIVES.get("group_dpo")(
        ScoreOutput(logp=torch.tensor(logp, dtype=torch.float64)), torch.zeros(2),
        StepBatch(mask=torch.ones(2, 1), group_ids=torch.tensor([0, 0]), combined_reward=torch.tensor([1.0, 0.0]),
                  ref_logp=torch.tensor(ref, dtype=torch.float64)),
    )[0]  # fmt: skip
    close(sem, plain)
    _, missing, metrics = sem_dpo(logp, ref, [1.0, 0.0], [float("nan"), 0.9], [0, 0], alpha=1.5)
    close(metrics["sem_dpo/weight"], math.exp(-1.5))
    close(missing, plain * math.exp(-1.5))


def test_a_similarity_column_outside_the_reward_table_is_refused():
    with pytest.raises(ValueError, match=r"similarity_column=2 is not a reward column; the config has 2 reward"):
        sem_dpo([[-1.0], [-2.0]], [[0.0], [0.0]], [1.0, 0.0], [0.5, 0.5], [0, 0], similarity_column=2)
    with pytest.raises(ValueError, match=r"alpha=-1.0 must be >= 0"):
        sem_dpo([[-1.0], [-2.0]], [[0.0], [0.0]], [1.0, 0.0], [0.5, 0.5], [0, 0], alpha=-1.0)


def test_prompt_similarity_is_the_cosine_of_hashed_ngram_bags():
    # "ab" padded " ab ": word ab + 3-grams " ab", "ab "; "ab ab": the same buckets, each counted twice
    one = hashed_ngram_embedding("ab", n=3, buckets=1 << 20)
    assert sorted(one.values()) == [1, 1, 1]
    two = hashed_ngram_embedding("AB ab", n=3, buckets=1 << 20)
    assert cosine(one, two) == pytest.approx(1.0)
    assert cosine(one, hashed_ngram_embedding("xyz", n=3, buckets=1 << 20)) == 0.0
    reward = REWARDS.get("prompt_similarity")()
    close_to, far, empty = reward(["a red fox in snow"] * 3, ["a red fox in the snow", "blue whale", ""])
    assert 0.7 < close_to < 1.0 and far < 0.2 and empty == 0.0
    assert REWARDS.get("prompt_similarity")(column="original")(["long instruction"], ["red fox"],
                                                                original=["red fox"]) == [pytest.approx(1.0)]  # fmt: skip
    with pytest.raises(ValueError, match=r"n=0 must be an integer >= 1"):
        REWARDS.get("prompt_similarity")(n=0)


def test_prompt_similarity_with_a_local_sentence_encoder_is_the_cosine_of_mean_pooled_states(tmp_path):
    from transformers import BertConfig, BertModel

    from genalign.policies.lm.tiny import build_tiny_tokenizer

    torch.manual_seed(0)
    tokenizer = build_tiny_tokenizer(64)
    model = BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32, max_position_embeddings=32)).eval()  # fmt: skip
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    reward = REWARDS.get("prompt_similarity")(encoder=str(tmp_path))
    prompts, completions = ["a b c", "x y"], ["a b", "z z z q"]
    values = reward(prompts, completions)

    def embed(text):  # one text alone (no padding): the plain mean of its last hidden states
        ids = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            return model(**ids).last_hidden_state[0].mean(0)

    expected = [float(torch.nn.functional.cosine_similarity(embed(p), embed(c), dim=0))
                for p, c in zip(prompts, completions, strict=True)]  # fmt: skip
    assert values == pytest.approx(expected, abs=1e-5)
    with pytest.raises(FileNotFoundError, match="encoder"):
        REWARDS.get("prompt_similarity")(encoder=str(tmp_path / "missing"))
