"""Replay rules (RePO [233], EFRame [166], AR3PO [106]) on hand-made outcomes: the buffer's insert / evict /
retrieve, each replay strategy, the forced samples carrying stored tokens and behaviour log-probs exactly, AR3PO's
stages, EFRame's filter, the state round trip without pickle, and the off-policy clip's importance weight."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from genalign.algorithms.batch import StepBatch
from genalign.config.schema import AlgorithmConfig
from genalign.experimental.clip_forms.masking import off_policy_clip
from genalign.experimental.sampling.replay import AR3PO, EFRame, RePO
from genalign.experimental.sampling.replay_buffer import ReplayBuffer, StoredSample, replay_generator, select_replays
from genalign.sampling import SAMPLE_SOURCES, Outcome
from genalign.sampling.base import check_off_policy_sources
from genalign.trainer.state_io import load_state, save_state

NAN = float("nan")


def completion(seed: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct action ids ``[length]`` and float32 log-probs ``[length]`` for sample ``seed``."""
    tokens = torch.arange(length) + 10 * seed + 1
    logp = -(torch.arange(length, dtype=torch.float32) + 1.0) / (seed + 3.0)
    return tokens, logp


def outcome(positions, indices, rewards, lengths, *, step, forced=None, truncated=None, round=0) -> Outcome:
    """An outcome whose sample ``i`` has the completion ``completion(seeds[i])``, seeds = 100·step + i."""
    n, width = len(positions), max(lengths)
    tokens, logp = torch.zeros(n, width, dtype=torch.long), torch.zeros(n, width)
    for i, length in enumerate(lengths):
        tokens[i, :length], logp[i, :length] = completion(100 * step + i, length)
    return Outcome(
        positions=torch.tensor(positions),
        indices=torch.tensor(indices),
        rewards=torch.tensor(rewards, dtype=torch.float64),
        lengths=torch.tensor(lengths, dtype=torch.float64),
        truncated=None if truncated is None else torch.tensor(truncated),
        progress=0.5,
        forced=torch.tensor(forced if forced is not None else [False] * n),
        tokens=tokens,
        behaviour_logp=logp,
        round=round,
        step=step,
    )


def fill(buffer: ReplayBuffer, items) -> None:
    for index, seed, reward, step in items:
        tokens, logp = completion(seed, 2)
        buffer.add(index, tokens, logp, reward, step)


def seeds(samples: list[StoredSample]) -> list[int]:
    """The completion seed of stored samples (``completion`` starts its tokens at ``10·seed + 1``)."""
    return [(int(s.tokens[0]) - 1) // 10 for s in samples]


# ------------------------------------------------------------------------------------------------------------ buffer
def test_buffer_evicts_the_prompts_oldest_then_the_buffers_oldest():
    buffer = ReplayBuffer(per_prompt=2, capacity=3)
    fill(buffer, [(5, 0, 1.0, 1), (5, 1, 0.0, 1), (5, 2, 1.0, 2)])
    assert seeds(buffer.stored(5)) == [1, 2] and len(buffer) == 2  # per-prompt FIFO: seed 0 left
    fill(buffer, [(7, 3, 0.5, 2)])
    assert len(buffer) == 3 and buffer.prompts == 2
    fill(buffer, [(7, 4, 0.0, 3)])  # 4 > capacity 3: the oldest of all (seed 1, serial 1) leaves
    assert seeds(buffer.stored(5)) == [2] and seeds(buffer.stored(7)) == [3, 4]
    fill(buffer, [(9, 5, 1.0, 3)])  # seed 2 leaves, and prompt 5 with it
    assert buffer.stored(5) == [] and buffer.prompts == 2 and len(buffer) == 3
    assert [(s.reward, s.step, s.serial) for s in buffer.stored(7)] == [(0.5, 2, 3), (0.0, 3, 4)]
    with pytest.raises(ValueError, match="per_prompt = 0 must be an integer >= 1"):
        ReplayBuffer(per_prompt=0, capacity=3)


STORED = [  # (seed, reward): serials 0 .. 4
    (0, 0.0), (1, 1.0), (2, 0.5), (3, 1.0), (4, 0.0),
]  # fmt: skip


def stored_prompt() -> list[StoredSample]:
    buffer = ReplayBuffer(per_prompt=8, capacity=8)
    fill(buffer, [(1, seed, reward, 1) for seed, reward in STORED])
    return buffer.stored(1)


@pytest.mark.parametrize(
    ("strategy", "k", "expected"),
    [
        ("recent", 2, [3, 4]),
        ("highest_reward", 2, [1, 3]),
        ("highest_reward", 1, [3]),  # ties: the newest
        ("max_variance", 2, [0, 3]),  # one 0 and one 1 (variance 1/4); ties: larger sum, then the earlier candidate
        ("all", 2, [0, 1, 2, 3, 4]),
        ("recent", 9, [0, 1, 2, 3, 4]),  # fewer stored than k: all of them
    ],
)
def test_replay_strategies_pick_by_hand(strategy, k, expected):
    assert seeds(select_replays(stored_prompt(), k, strategy, replay_generator(1, 1))) == expected


def test_max_variance_equals_the_exhaustive_search():
    generator = torch.Generator().manual_seed(0)
    for trial in range(30):
        rewards = torch.randint(0, 4, (7,), generator=generator).double() / 3.0  # ties are common
        buffer = ReplayBuffer(per_prompt=7, capacity=7)
        fill(buffer, [(0, i, float(r), 1) for i, r in enumerate(rewards)])
        k = 2 + trial % 4
        got = select_replays(buffer.stored(0), k, "max_variance", generator)
        best = max(
            torch.tensor(c, dtype=torch.float64).var(unbiased=False).item()
            for c in itertools.combinations(rewards.tolist(), k)
        )
        chosen = torch.tensor([s.reward for s in got], dtype=torch.float64)
        assert len(got) == k and chosen.var(unbiased=False).item() == pytest.approx(best, abs=1e-12)


def test_random_strategy_is_uniform_and_reproducible():
    stored = stored_prompt()
    assert seeds(select_replays(stored, 2, "random", replay_generator(4, 1))) == seeds(
        select_replays(stored, 2, "random", replay_generator(4, 1))
    )
    counts = torch.zeros(5)
    generator = torch.Generator().manual_seed(1)
    for _ in range(3000):
        counts[seeds(select_replays(stored, 2, "random", generator))] += 1
    torch.testing.assert_close(counts / 3000, torch.full((5,), 2 / 5), atol=0.03, rtol=0)


# -------------------------------------------------------------------------------------------------------------- RePO
def test_repo_replays_stored_completions_exactly_and_never_restores_them():
    repo = RePO(replays=1, strategy="highest_reward", per_prompt=2, min_stored=2)
    first = outcome([10, 10, 11], [3, 3, 4], [1.0, 0.0, 1.0], [2, 3, 1], step=1)
    assert repo.forced_samples(first) == []  # nothing stored yet
    stats = repo.after_rewards(first).stats
    assert stats["buffer_size"] == 3.0 and stats["replayed"] == 0.0 and math.isnan(stats["staleness_mean"])
    second = outcome([20, 20, 21], [3, 3, 4], [0.0, 0.0, 0.0], [1, 1, 1], step=3)
    forced = repo.forced_samples(second)  # prompt 4 holds 1 < min_stored = 2 completions: not replayed
    assert [(f.position, f.kind, f.text) for f in forced] == [(20, "replay", None)]
    tokens, logp = completion(100 + 0, 2)  # step 1, sample 0: the highest reward of prompt 3
    assert torch.equal(forced[0].tokens, tokens) and torch.equal(forced[0].behaviour_logp, logp)
    assert forced[0].tokens.dtype == torch.long and forced[0].behaviour_logp.dtype == torch.float32
    final = outcome([20, 20, 21, 20], [3, 3, 4, 3], [0.0, 0.0, 0.0, 1.0], [1, 1, 1, 2], step=3,
                    forced=[False, False, False, True])  # fmt: skip
    stats = repo.after_rewards(final).stats
    assert stats["replayed"] == 1.0 and stats["staleness_mean"] == 2.0  # sampled at step 1, replayed at step 3
    assert seeds(repo.buffer.stored(3)) == [300, 301]  # this step's two sampled completions, not the forced one
    assert seeds(repo.buffer.stored(4)) == [102, 302] and stats["buffer_size"] == 4.0


def test_repo_rejects_a_buffer_that_never_replays():
    with pytest.raises(ValueError, match="min_stored = 20 exceeds per_prompt = 16"):
        RePO(min_stored=20)
    with pytest.raises(ValueError, match="strategy = 'newest' must be one of"):
        RePO(strategy="newest")


# ------------------------------------------------------------------------------------------------------------- AR3PO
def test_ar3po_samples_unsolved_prompts_in_stages():
    ar3po = AR3PO(stages=3, stage_samples=4)
    assert ar3po.rounds == 3
    round0 = outcome([1, 1, 2, 2, 3, 3], [0, 0, 1, 1, 2, 2], [0.0, 0.0, 1.0, 0.0, NAN, NAN], [1] * 6, step=1)
    assert ar3po.more_samples(round0) == {1: 4}  # prompt 2 solved; prompt 3 has no reward at all
    round1 = outcome([1, 1, 2, 2, 3, 3, 1, 1, 1, 1], [0, 0, 1, 1, 2, 2, 0, 0, 0, 0],
                     [0.0, 0.0, 1.0, 0.0, NAN, NAN, 0.0, 0.0, 1.0, 0.0], [1] * 10, step=1, round=1)  # fmt: skip
    assert ar3po.more_samples(round1) == {}  # prompt 1 found a correct response in the second stage
    decision = ar3po.after_rewards(round1)
    assert decision.keep is None and decision.train is None
    assert decision.stats["stored"] == 2.0 and decision.stats["frac_unsolved"] == 0.0
    assert seeds(ar3po.buffer.stored(0)) == [108] and seeds(ar3po.buffer.stored(1)) == [102]


def test_ar3po_reuses_an_earlier_correct_response_of_a_still_unsolved_prompt():
    ar3po = AR3PO(stages=2, stage_samples=2, reuse=1)
    ar3po.after_rewards(outcome([1, 1, 2, 2], [7, 7, 8, 8], [1.0, 1.0, 0.0, 1.0], [2, 3, 2, 2], step=1))
    assert seeds(ar3po.buffer.stored(7)) == [100, 101] and seeds(ar3po.buffer.stored(8)) == [103]
    later = outcome([5, 5, 6, 6], [7, 7, 8, 8], [0.0, 0.0, 0.0, 1.0], [1, 1, 1, 1], step=4, round=1)
    forced = ar3po.forced_samples(later)  # prompt 8 is solved: nothing for it
    assert [f.position for f in forced] == [5]
    tokens, logp = completion(101, 3)  # the newest correct response of prompt 7
    assert torch.equal(forced[0].tokens, tokens) and torch.equal(forced[0].behaviour_logp, logp)
    final = outcome([5, 5, 6, 6, 5], [7, 7, 8, 8, 7], [0.0, 0.0, 0.0, 1.0, 1.0], [1, 1, 1, 1, 3], step=4,
                    forced=[False, False, False, False, True])  # fmt: skip
    stats = ar3po.after_rewards(final).stats
    assert stats["replayed"] == 1.0 and stats["staleness_mean"] == 3.0
    assert stats["frac_unsolved"] == 0.5  # the forced response does not count as solving prompt 7
    assert seeds(ar3po.buffer.stored(7)) == [100, 101]  # the forced sample is not stored again


# ------------------------------------------------------------------------------------------------------------ EFRame
def test_eframe_explores_failed_prompts_and_filters_by_advantage():
    eframe = EFRame(extra_samples=4, replays=1)
    assert eframe.rounds == 2
    # prompt 1: [1, 0, 0, 0] (the success truncated); prompt 2: [0, 0] failed; prompt 3: [1, 1] solved
    round0 = outcome([1, 1, 1, 1, 2, 2, 3, 3], [0, 0, 0, 0, 5, 5, 6, 6], [1, 0, 0, 0, 0, 0, 1, 1], [2] * 8, step=1)
    assert eframe.more_samples(round0) == {2: 4}
    rewards = [1, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0]  # prompt 2's extra round: [1, 0, 0, 0]
    truncated = [True] + [False] * 11
    final = outcome([1, 1, 1, 1, 2, 2, 3, 3, 2, 2, 2, 2], [0, 0, 0, 0, 5, 5, 6, 6, 5, 5, 5, 5], rewards, [2] * 12,
                    step=1, truncated=truncated, round=1)  # fmt: skip
    decision = eframe.after_rewards(final)
    # prompt 1: mean 1/4, unbiased std 1/2: Â = 1.5 (truncated, positive: out), −0.5 ×3 (in)
    # prompt 2: [0, 0 | 1, 0, 0, 0]: mean 1/6, std sqrt(1/6) = 0.408: Â = 2.04 (extra success: in),
    #           −0.408 (first round: in; extra round: |Â| <= 1, out)
    # prompt 3: Â = 0 (out: no signal)
    expected = [False, True, True, True, True, True, False, False, True, False, False, False]
    assert decision.train.tolist() == expected and decision.keep is None
    assert decision.stats["overlong_positive"] == 1.0 and decision.stats["explored_samples"] == 4.0
    assert decision.stats["frac_filtered"] == pytest.approx(6 / 12)
    assert decision.stats["stored"] == 1.0 and seeds(eframe.buffer.stored(5)) == [108]  # the rare success
    again = outcome([9, 9], [5, 5], [0.0, 0.0], [1, 1], step=2)
    forced = eframe.forced_samples(again)
    tokens, logp = completion(108, 2)
    assert [f.position for f in forced] == [9] and torch.equal(forced[0].tokens, tokens)
    assert torch.equal(forced[0].behaviour_logp, logp)


# ------------------------------------------------------------------------------------------------------ state, clip
@pytest.mark.parametrize("rule", [RePO, EFRame, AR3PO])
def test_state_round_trips_through_the_checkpoint_format_exactly(rule, tmp_path):
    source = rule()
    state_empty = rule().state_dict()
    save_state(state_empty, tmp_path / "empty")
    rule().load_state_dict(load_state(tmp_path / "empty"))
    for index, step in [(3, 1), (4, 1), (3, 2)]:
        for i in range(3):
            tokens, logp = completion(10 * step + i, 2 + i)
            source.buffer.add(index, tokens, logp, 0.25 * i + 1 / 3, step)
    paths = save_state(source.state_dict(), tmp_path / "rule")
    assert {p.suffix for p in paths} == {".json", ".safetensors"}
    json.loads(paths[0].read_text())  # plain JSON: no pickle anywhere
    restored = rule()
    restored.load_state_dict(load_state(tmp_path / "rule"))
    for index in (3, 4):
        got, want = restored.buffer.stored(index), source.buffer.stored(index)
        assert [(s.reward, s.step, s.serial) for s in got] == [(s.reward, s.step, s.serial) for s in want]
        assert all(torch.equal(a.tokens, b.tokens) and torch.equal(a.behaviour_logp, b.behaviour_logp)
                   for a, b in zip(got, want, strict=True))  # fmt: skip
    assert len(restored.buffer) == len(source.buffer)
    tokens, logp = completion(99, 1)
    for buffer in (source.buffer, restored.buffer):  # the serial counter is restored too
        buffer.add(4, tokens, logp, 0.0, 3)
    assert [s.serial for s in restored.buffer.stored(4)] == [s.serial for s in source.buffer.stored(4)]


def test_off_policy_clip_weights_a_replayed_sample_by_its_stored_behaviour_logp():
    logp = torch.tensor([[-1.0, -2.0, -0.5]])  # log πθ
    iterate = torch.tensor([[-1.1, -1.9, -0.8]])  # log π_k (old_logp, re-scored before the update)
    behaviour = torch.tensor([[-1.5, -1.2, -0.9]])  # log π_β, stored with the replayed completion
    advantages = torch.tensor([[1.0, -1.0, 1.0]])
    context = StepBatch(old_logp=iterate, behaviour_logp=behaviour, mask=torch.ones(1, 3))
    logp = logp.requires_grad_()
    out = off_policy_clip(logp - iterate, advantages, context, eps_low=0.2, eps_high=0.2)
    # actions 0, 1: |log πθ − log π_k| = 0.1 inside [log 0.8, log 1.2]: the weight is exp(log πθ − log π_β)
    assert out.log_weight[0, :2].tolist() == pytest.approx([0.5, -0.8], abs=1e-6)
    # action 2: πθ/π_k = e^0.3 > 1.2 with A > 0: capped at 1.2·π_k/π_β, no gradient
    assert out.log_weight[0, 2].item() == pytest.approx(math.log(1.2) + 0.1, abs=1e-6)
    assert out.clipped_high.tolist() == [[False, False, True]]
    (advantages * out.log_weight.exp()).sum().backward()  # the surrogate's gradient carries the importance weight
    assert logp.grad.tolist()[0] == pytest.approx([math.exp(0.5), -math.exp(-0.8), 0.0], abs=1e-6)


@pytest.mark.parametrize("name", ["repo", "eframe", "ar3po"])
def test_check_replay_clip_needs_the_off_policy_clip(name):
    assert SAMPLE_SOURCES.meta(name)["off_policy"] and SAMPLE_SOURCES.tier(name) == "experimental"
    check_off_policy_sources(AlgorithmConfig(sample_sources=[name], clip="off_policy"))
    check_off_policy_sources(AlgorithmConfig(sample_sources=["depo"], clip="ppo"))  # nothing replayed
    with pytest.raises(ValueError, match=rf"rule '{name}' replays .* algorithm.clip = 'ppo' .* set algorithm.clip"):
        check_off_policy_sources(AlgorithmConfig(sample_sources=["depo", name], clip="ppo"))
    with pytest.raises(ValueError, match=r"algorithm.objective = 'nft' is not a ratio objective"):
        check_off_policy_sources(AlgorithmConfig(sample_sources=[name], objective="nft", clip="off_policy"))


def test_eframe_gives_a_lone_sample_no_advantage():
    eframe = EFRame()
    decision = eframe.after_rewards(outcome([1, 2, 2], [0, 1, 1], [1.0, 1.0, 0.0], [1, 1, 1], step=1))
    assert decision.train.tolist() == [False, True, True]  # Â = 0 for the lone sample; ±0.707 in the pair
