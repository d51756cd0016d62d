"""The sample sources whose samples the teacher writes, on hand-made outcomes: which prompts and samples get a teacher
completion, where the student's prefix is cut, which samples the teacher's replace, the Thompson gate and its
posteriors ([72]/[88] teacher_sft, [133] tgpo, [196] mentor, [202] hapo, [313] small_to_large)."""

from __future__ import annotations

import json
import random

import pytest
import torch

from genalign.experimental.regularizers.expert import EXPERT_DEMO
from genalign.experimental.sampling.mixed_prefix import prefix_length
from genalign.experimental.sampling.teacher_injection import gate_draws
from genalign.experimental.sampling.tokens import cut_generator
from genalign.sampling import SAMPLE_SOURCES, Outcome


def outcome(positions, rewards, forced=None, *, step=1, progress=0.0, tokens=None, logp=None) -> Outcome:
    """Samples of prompts ``positions`` (data index position + 100) with ``rewards``; ``tokens`` / ``logp`` ``[N, T]``."""
    n = len(positions)
    lengths = (tokens > 0).sum(1).double() if tokens is not None else torch.full((n,), 3.0)
    return Outcome(positions=torch.tensor(positions), indices=torch.tensor(positions) + 100,
                   rewards=torch.tensor(rewards, dtype=torch.float64), lengths=lengths, truncated=None,
                   progress=progress, forced=torch.tensor(forced or [False] * n), tokens=tokens,
                   behaviour_logp=logp, step=step)  # fmt: skip


def test_teacher_sft_teaches_the_failed_prompts_with_their_verified_teacher_rollouts():
    rule = SAMPLE_SOURCES.get("teacher_sft")(rollouts=2, until_step=3)
    # prompt 0 fails every sample, prompt 1 passes one of three
    drawn = outcome([0, 0, 0, 1, 1, 1], [0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    forced = rule.forced_samples(drawn)
    assert [(f.position, f.teacher_writes, f.tokens.tolist(), f.teacher_tokens) for f in forced] == [
        (0, True, [], None),
        (0, True, [], None),
    ]  # whole completions, written by the teacher, for the hard prompt only
    # one teacher rollout verified (1.0), one not (0.0)
    after = outcome([0, 0, 0, 1, 1, 1, 0, 0], [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0], [False] * 6 + [True] * 2)
    decision = rule.after_rewards(after)
    # the verified rollout replaces the last-drawn student sample of prompt 0; the unverified one leaves
    assert decision.keep.tolist() == [True, True, False, True, True, True, True, False]
    assert decision.signals[EXPERT_DEMO].tolist() == [False] * 6 + [True, False]
    assert decision.stats == {"hard_prompts": 1.0, "taught_prompts": 1.0, "teacher_success": 0.5}
    assert rule.forced_samples(outcome([0, 0], [0.0, 0.0], step=4)) == []  # after until_step: GRPO alone
    bridge = SAMPLE_SOURCES.get("teacher_sft")(rollouts=2, max_pass_rate=1.0, verified=False)  # [88]'s warm-up
    assert len(bridge.forced_samples(drawn)) == 4
    warm = bridge.after_rewards(outcome([0, 0, 0, 0], [1.0, 1.0, 0.0, 1.0], [False, False, True, True]))
    assert warm.keep.tolist() == [False, False, True, True]  # the teacher's rollouts are the whole group
    assert warm.signals[EXPERT_DEMO].tolist() == [False, False, True, True]
    with pytest.raises(ValueError, match=r"max_pass_rate = 1\.5"):
        SAMPLE_SOURCES.get("teacher_sft")(max_pass_rate=1.5)


def test_tgpo_has_the_teacher_continue_a_drawn_prefix_of_each_failed_sample():
    rule = SAMPLE_SOURCES.get("tgpo")(guided=1, min_fraction=0.25, max_fraction=0.75)
    tokens = torch.tensor([[5, 6, 7, 8], [9, 10, 2, 0], [11, 12, 13, 0]])
    logp = -torch.arange(1, 13, dtype=torch.float32).reshape(3, 4) / 10
    drawn = outcome([0, 0, 1], [1.0, 0.0, 0.0], tokens=tokens, logp=logp, step=2)
    forced = rule.forced_samples(drawn)
    assert [f.position for f in forced] == [0, 1]  # the failed samples 1 and 2; the success is not guided
    for item, sample in zip(forced, [1, 2], strict=True):
        draw = float(torch.rand((), generator=cut_generator(2, 100 + item.position, salt=sample), dtype=torch.float64))
        k = prefix_length(3, 0.25 + 0.5 * draw)
        assert item.tokens.tolist() == tokens[sample, :k].tolist()
        assert item.behaviour_logp.tolist() == logp[sample, :k].tolist()  # the student's own log-probs
        assert item.teacher_writes and not item.continues and item.teacher_tokens is None
    stats = rule.after_rewards(outcome([0, 0, 1, 0, 1], [1.0, 0.0, 0.0, 1.0, 0.0], [False] * 3 + [True] * 2)).stats
    assert stats["guided"] == 2.0 and stats["guided_success"] == 0.5


def test_mentor_hands_the_first_uncertain_token_to_the_teacher_for_a_span():
    rule = SAMPLE_SOURCES.get("mentor")(min_surprise=1.0, span=2)
    tokens = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    logp = torch.tensor([[-0.1, -0.5, -1.2, -3.0], [-0.1, -0.2, -0.3, -0.4]])  # sample 1 is never uncertain
    forced = rule.forced_samples(outcome([0, 0], [0.0, 0.0], tokens=tokens, logp=logp))
    assert len(forced) == 1  # e^{-1.2} < e^{-1}: token 2 of sample 0 is its first critical point
    item = forced[0]
    assert item.tokens.tolist() == [5, 6] and item.behaviour_logp.tolist() == pytest.approx([-0.1, -0.5])
    assert item.teacher_writes and item.teacher_tokens == 2 and item.continues  # then the student goes on
    assert rule.critical(torch.tensor([-1.0, -2.0])) == 0 and rule.critical(torch.tensor([-0.9])) is None


def test_hapo_injects_on_failure_when_the_teacher_draw_beats_the_students_and_updates_both_posteriors():
    rule = SAMPLE_SOURCES.get("hapo")(decay=0.5)
    rule.student, rule.teacher = [1.0, 9.0], [9.0, 1.0]  # a weak student, a strong teacher
    drawn = outcome([0, 0, 1, 1], [0.0, 0.0, 1.0, 0.0], step=7)
    student, teacher = gate_draws(7, 0, (1.0, 9.0), (9.0, 1.0))
    expected_student = random.Random((7 * 1_000_003 + 0 * 7_919 + 31) % 2**63)
    assert student == expected_student.betavariate(1.0, 9.0) and teacher == expected_student.betavariate(9.0, 1.0)
    assert teacher > student
    forced = rule.forced_samples(drawn)
    assert [(f.position, f.teacher_writes, f.tokens.tolist()) for f in forced] == [(0, True, [])]  # prompt 1 passed
    decision = rule.after_rewards(outcome([0, 0, 1, 1, 0], [0.0, 0.0, 1.0, 0.0, 1.0], [False] * 4 + [True]))
    assert decision.keep.tolist() == [True, False, True, True, True]  # the demonstration replaces the last wrong one
    # student: 1 success of 4 drawn; teacher: 1 of 1 injected; counts decayed by 0.5 first
    assert rule.student == [0.5 * 1 + 1, 0.5 * 9 + 3] and rule.teacher == [0.5 * 9 + 1, 0.5 * 1 + 0]
    assert decision.stats["injected"] == 1.0 and decision.stats["gated"] == 1.0
    restored = SAMPLE_SOURCES.get("hapo")()
    restored.load_state_dict(json.loads(json.dumps(rule.state_dict())))  # JSON-able, checkpointed
    assert (restored.student, restored.teacher) == (rule.student, rule.teacher)
    rule.load_state_dict({"student": [50.0, 1.0], "teacher": [1.0, 50.0]})  # a strong student: the gate closes
    assert rule.forced_samples(drawn) == []
    failed = SAMPLE_SOURCES.get("hapo")()
    failed.student, failed.teacher = [1.0, 9.0], [9.0, 1.0]
    failed.forced_samples(drawn)
    kept = failed.after_rewards(outcome([0, 0, 1, 1, 0], [0.0, 0.0, 1.0, 0.0, 0.0], [False] * 4 + [True])).keep
    assert kept.tolist() == [True, True, True, True, False]  # a failed demonstration leaves, the group is unchanged


def test_small_to_large_has_the_explorer_write_an_annealed_share_instead_of_the_learner():
    """G = 4, start_fraction 0.5, anneal_until 0.5: the first rollout draws G − round(0.5·4) = 2 learner samples per
    prompt (the saving); at progress 0 the explorer writes the other 2; at progress 0.2 (φ = 0.3, m = round(1.2) = 1)
    a top-up round draws 1 more learner sample and the explorer writes 1; from progress 0.5 on the learner draws all."""
    rule = SAMPLE_SOURCES.get("small_to_large")(start_fraction=0.5, anneal_until=0.5)
    assert rule.share(0.0) == 0.5 and rule.share(0.25) == 0.25 and rule.share(0.5) == 0.0 and rule.share(0.9) == 0.0
    assert rule.samples_per_prompt(4) == 2 and rule.rounds == 2
    drawn = outcome([0, 0, 1, 1], [0.0] * 4, progress=0.0)
    assert rule.more_samples(drawn) == {}  # no top-up at the start
    forced = rule.forced_samples(drawn)
    assert [(f.position, f.kind, f.teacher_writes) for f in forced] == [(0, "explorer", True)] * 2 + [
        (1, "explorer", True)
    ] * 2
    after = outcome([0, 0, 1, 1, 0, 0, 1, 1], [0.0] * 4 + [1.0, 0.0, 1.0, 1.0], [False] * 4 + [True] * 4)
    decision = rule.after_rewards(after)
    assert decision.keep is None  # every sample stays: the group is 2 learner + 2 explorer samples
    assert decision.stats["explorer_samples"] == 4.0 and decision.stats["learner_samples"] == 4.0
    assert decision.stats["explorer_reward_mean"] == 0.75
    later = outcome([0, 0, 1, 1], [0.0] * 4, progress=0.2)
    assert rule.more_samples(later) == {0: 1, 1: 1}
    topped = outcome([0, 0, 1, 1, 0, 1], [0.0] * 6, progress=0.2)
    assert rule.more_samples(topped) == {} and len(rule.forced_samples(topped)) == 2  # 3 learner + 1 explorer each
    assert rule.more_samples(outcome([0, 0], [0.0, 0.0], progress=0.6)) == {0: 2} and not rule.forced_samples(
        outcome([0, 0, 0, 0], [0.0] * 4, progress=0.6)
    )
    whole = SAMPLE_SOURCES.get("small_to_large")(start_fraction=1.0)
    assert whole.samples_per_prompt(4) == 1  # the learner keeps one sample of every group
