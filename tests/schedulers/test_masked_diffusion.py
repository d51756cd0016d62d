"""Block-unmasking generation for masked diffusion LMs: schedule, commit counts, block order, sampling, EOS, errors."""

from __future__ import annotations

import pytest
import torch

from genalign.schedulers.masked_diffusion import (
    MaskedDiffusionScheduler,
    check_generation_args,
    completion_mask_through_first_eos,
    generate,
    gumbel_max_sample,
    tokens_per_step,
)

VOCAB, MASK, EOS = 6, 6, 5


def random_context_model(seed: int = 0):
    """A toy bidirectional model: logits depend on every token of the input (so order and context matter)."""
    g = torch.Generator().manual_seed(seed)
    embed = torch.randn(VOCAB + 1, 8, generator=g)
    head = torch.randn(8, VOCAB + 1, generator=g)
    position = torch.randn(32, 8, generator=g)

    def model_fn(ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        h = embed[ids] + position[: ids.shape[1]]  # [B, L, 8]
        context = h.mean(dim=1, keepdim=True)  # [B, 1, 8]
        logits = 0.5 * torch.tanh(h + context) @ head  # [B, L, V+1]
        return logits.index_fill(-1, torch.tensor([MASK]), -1e4)  # never predict the mask token

    return model_fn


def run(remasking="low_confidence", gen_length=6, block_length=3, steps=4, temperature=1.0, seed=0, batch=4, **kw):
    prompt = torch.randint(0, VOCAB - 1, (batch, 3), generator=torch.Generator().manual_seed(1))
    return generate(
        random_context_model(),
        prompt,
        mask_id=MASK,
        gen_length=gen_length,
        block_length=block_length,
        steps=steps,
        temperature=temperature,
        remasking=remasking,
        generator=torch.Generator().manual_seed(seed),
        **kw,
    )


def test_tokens_per_step_matches_llada_schedule():
    assert tokens_per_step(5, 3) == [2, 2, 1]
    assert tokens_per_step(4, 4) == [1, 1, 1, 1]
    assert tokens_per_step(8, 2) == [4, 4]


@pytest.mark.parametrize("remasking", ["low_confidence", "random", "threshold"])
def test_every_mask_is_filled_and_blocks_go_left_to_right(remasking):
    out = run(remasking=remasking, gen_length=6, block_length=3, steps=4)
    assert out.completion_ids.shape == (4, 6)
    assert not (out.completion_ids == MASK).any()
    assert (out.decode_step >= 0).all() and (out.decode_step < 4).all()
    first_block, second_block = out.decode_step[:, :3], out.decode_step[:, 3:]
    assert (first_block.max(dim=1).values < second_block.min(dim=1).values).all()


@pytest.mark.parametrize("remasking", ["low_confidence", "random"])
def test_tokens_committed_per_step_follow_the_schedule(remasking):
    out = run(remasking=remasking, gen_length=10, block_length=5, steps=6)  # 3 steps per block: 2, 2, 1 tokens
    expected = [2, 2, 1, 2, 2, 1]
    for step, count in enumerate(expected):
        assert ((out.decode_step == step).sum(dim=1) == count).all()
    assert out.num_forward == 6


def test_threshold_commits_at_least_the_schedule_and_finishes_confident_blocks_early():
    def confident(ids, attention_mask):  # always predicts token 2 with probability ~1
        logits = torch.full((*ids.shape, VOCAB + 1), -30.0)
        logits[..., 2] = 30.0
        return logits

    prompt = torch.zeros(2, 3, dtype=torch.long)
    out = generate(confident, prompt, mask_id=MASK, gen_length=6, block_length=3, steps=6, remasking="threshold")
    assert (out.completion_ids == 2).all()
    assert out.num_forward == 2  # one step per block: every position is above the threshold
    assert ((out.decode_step == 0).sum(dim=1) == 3).all() and ((out.decode_step == 3).sum(dim=1) == 3).all()


def test_low_confidence_commits_the_most_confident_position_first():
    def peaked(ids, attention_mask):  # position 4 (answer index 1) is the most confident, then 3, then 5
        logits = torch.zeros((*ids.shape, VOCAB + 1))
        logits[:, 3, 1], logits[:, 4, 1], logits[:, 5, 1] = 3.0, 9.0, 1.0
        return logits

    out = generate(peaked, torch.zeros(1, 3, dtype=torch.long), mask_id=MASK, gen_length=3, block_length=3, steps=3)
    assert out.decode_step.tolist() == [[1, 0, 2]]


def test_greedy_generation_is_deterministic_and_temperature_sampling_is_seeded():
    greedy_a, greedy_b = run(temperature=0.0, seed=0), run(temperature=0.0, seed=1)
    assert torch.equal(greedy_a.completion_ids, greedy_b.completion_ids)
    assert torch.equal(run(seed=3).completion_ids, run(seed=3).completion_ids)
    draws = {tuple(run(seed=s, batch=1).completion_ids[0].tolist()) for s in range(8)}
    assert len(draws) > 1


def test_gumbel_max_sampling_matches_the_tempered_softmax():
    logits = torch.tensor([[[0.0, 1.0, 2.0]]]).expand(1, 20000, 3)
    temperature = 0.7
    draws = gumbel_max_sample(logits, temperature, torch.Generator().manual_seed(0))  # [1, 20000]
    frequencies = torch.bincount(draws.flatten(), minlength=3).double() / draws.numel()
    expected = torch.softmax(torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64) / temperature, dim=0)
    assert torch.allclose(frequencies, expected, atol=0.015)
    assert (gumbel_max_sample(logits, 0.0, None) == 2).all()


def test_eos_handling_mask_covers_up_to_the_first_eos():
    completion = torch.tensor([[1, EOS, 2, EOS], [1, 2, 3, 4], [EOS, EOS, EOS, EOS]])
    mask = completion_mask_through_first_eos(completion, EOS)
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert completion_mask_through_first_eos(completion, None).sum() == 12


def test_scheduler_step_keeps_committed_tokens_and_prompt():
    scheduler = MaskedDiffusionScheduler(mask_id=MASK, gen_length=4, block_length=2, temperature=0.0)
    scheduler.set_timesteps(4)
    assert scheduler.schedule == [(0, 1), (0, 1), (1, 1), (1, 1)]
    sample = torch.tensor([[0, 1, MASK, MASK, MASK, MASK]])
    logits = torch.randn(1, 6, VOCAB + 1, generator=torch.Generator().manual_seed(0))
    out = scheduler.step(logits, 0, sample, prompt_length=2)
    assert out.committed.sum() == 1 and out.committed[0, 2:4].sum() == 1  # inside the first block only
    assert torch.equal(out.prev_sample[:, :2], sample[:, :2])


def test_bad_input_errors_state_the_rule_and_the_fix():
    with pytest.raises(ValueError, match=r"block_length=4 must divide gen_length=10.*e\.g\. 2"):
        check_generation_args(gen_length=10, block_length=4, steps=10, mask_id=MASK)
    with pytest.raises(ValueError, match=r"steps=5 must be divisible by the number of blocks.*=2.*steps=4 or steps=6"):
        check_generation_args(gen_length=8, block_length=4, steps=5, mask_id=MASK)
    with pytest.raises(ValueError, match=r"needs a mask token id.*Set mask_token_id"):
        check_generation_args(gen_length=8, block_length=4, steps=4, mask_id=None)
    with pytest.raises(ValueError, match="exceeds block_length"):
        check_generation_args(gen_length=4, block_length=4, steps=8, mask_id=MASK)
    with pytest.raises(ValueError, match="remasking='confidence' is not valid"):
        MaskedDiffusionScheduler(mask_id=MASK, gen_length=4, block_length=4, remasking="confidence")
