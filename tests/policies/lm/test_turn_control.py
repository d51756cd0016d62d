"""T²PO's rollout-time exploration control [171] (genalign/policies/lm/turn_control.py): the uncertainty test of the
thinking intervention and the progress test on hand-computed values, and in a rollout the intervention text as
untrained context inside a turn and turns without progress taken back and resampled, a bounded number of times, with
exact log-probs."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.base import RolloutRequest
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.multi_turn_options import MultiTurnOptions
from genalign.policies.lm.tiny import build_tiny_causal_lm
from genalign.policies.lm.turn_control import (
    ThinkingIntervention,
    TurnResampling,
    intervention_point,
    without_progress,
)
from tests.policies.lm.test_multi_turn import HERE, ROWS, Recorder, scores

torch.set_num_threads(1)
REQUEST = RolloutRequest(structure=frozenset({"turn_ids", "truncated"}))


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return build_tiny_causal_lm(tmp_path_factory.mktemp("models") / "qwen2", vocab_size=96)


def control_policy(model_path, **multi_turn):
    options = MultiTurnOptions(environments=f"{HERE}:Scripted", **multi_turn)
    config = CausalLMPolicyConfig(model=str(model_path), max_new_tokens=5, temperature=0.9, use_chat_template=True,
                                  multi_turn=options)  # fmt: skip
    return build_policy(config, "cpu")


def test_the_intervention_point_is_where_the_windowed_surprisal_stops_changing():
    # u = 1, 1, 2, 2, 2, 2 (w = 2): p = 4: |2 − 1| = 1; p = 5: |2 − 1.5| = 0.5; never below 0.1
    assert intervention_point([-1.0, -1.0, -2.0, -2.0, -2.0, -2.0], 2, 0.1) is None
    assert intervention_point([-1.0, -1.0, -2.0, -2.0, -2.0, -2.0], 2, 0.6) == 5
    # u = 1, 1, 1, 1, 3: p = 4: |1 − 1| = 0 < 0.1 (the last token is cut: p < len)
    assert intervention_point([-1.0, -1.0, -1.0, -1.0, -3.0], 2, 0.1) == 4
    assert intervention_point([-1.0, -1.0, -1.0, -1.0], 2, 0.1) is None  # p = 4 is not before the last token


def test_a_turn_without_progress_repeats_an_answer_or_barely_moves_its_uncertainty():
    options = TurnResampling(max_resamples=1, min_uncertainty_change=0.2)
    assert without_progress(options, "user: 3", ["user: 3"], 1.0, None)
    assert not without_progress(options, "user: 4", ["user: 3"], 1.0, None)  # first turn: no uncertainty test
    assert without_progress(options, "user: 4", ["user: 3"], 1.1, 1.0)  # |1.1 − 1.0| < 0.2
    assert not without_progress(options, "user: 4", ["user: 3"], 1.5, 1.0)
    only_change = TurnResampling(max_resamples=1, repeated_answer=False, min_uncertainty_change=0.2)
    assert not without_progress(only_change, "user: 3", ["user: 3"], 1.5, 1.0)


def test_turns_without_progress_are_resampled_a_bounded_number_of_times(model_path):
    """Scripted answers every turn with the same text and ends after 3 turns. Turn 1's answer repeats turn 0's, so
    turn 1 is taken back twice (the bound) before it is kept; turn 2 ends the episode. Calls: turn 0, turn 1 three
    times, turn 2; the trajectory holds the tokens of calls 0, 3 and 4 only. The environment is rewound each time
    (replayed: Scripted has no state), else it would have ended after the second call of turn 1."""
    policy = control_policy(model_path, resample_turns=TurnResampling(max_resamples=2))
    recorder = Recorder(policy)
    rollout = policy.rollout(ROWS, 2, request=REQUEST)
    assert len(recorder.calls) == 5
    assert rollout.counts["turns_resampled"] == 2 * 4 and rollout.counts["turns"] == 5 * 4
    mask = rollout.action_mask > 0
    ids = rollout.per_sample["completion_ids"]
    for i in range(4):
        kept = [token for call in (0, 3, 4) for token in recorder.calls[call][i]]
        assert ids[i][mask[i]].tolist() == kept
    assert rollout.structure["turn_ids"].max(dim=1).values.tolist() == [2] * 4
    assert not rollout.structure["truncated"].any()
    torch.testing.assert_close(scores(policy, rollout)[mask], rollout.old_logp[mask], rtol=0, atol=1e-4)
    assert torch.equal(scores(policy, rollout), scores(policy, rollout, parts=4)), "exact re-scoring"


def test_the_thinking_intervention_is_untrained_context_inside_the_turn(model_path):
    """With w = 1 and τ = 100 every change is below the threshold: every turn of at least 2w + 1 = 3 tokens is cut
    after 2 tokens, the text follows (mask 0, same turn) and the turn continues in a second call."""
    intervention = ThinkingIntervention(text=" wait", window=1, threshold=100.0)
    policy = control_policy(model_path, thinking_intervention=intervention)
    recorder = Recorder(policy)
    rollout = policy.rollout(ROWS, 2, request=REQUEST)
    text_ids = policy.chat_renderer.encode(" wait")
    long_turns, calls = 0, iter(recorder.calls)
    for first in calls:  # each turn: a call for the 4 samples, then one continuing the turns that were cut
        cut = sum(len(turn) >= 3 for turn in first)
        long_turns += cut
        if cut:
            assert len(next(calls)) == cut
    assert long_turns > 0 and rollout.counts["thinking_interventions"] == long_turns
    ids, mask, turns = rollout.per_sample["completion_ids"], rollout.action_mask > 0, rollout.structure["turn_ids"]
    found = 0
    for i in range(4):  # context runs followed by a model token of the same turn: the interventions
        t = 0
        while t < ids.shape[1]:
            if mask[i, t]:
                t += 1
                continue
            end = t
            while end < ids.shape[1] and not mask[i, end]:
                end += 1
            if end < ids.shape[1] and turns[i, end] == turns[i, t]:
                assert ids[i, t:end].tolist() == text_ids
                turn_start = int(((turns[i] == turns[i, t]) & mask[i]).nonzero()[0])
                assert t - turn_start == 2 and bool(mask[i, turn_start:t].all()), "cut after 2 model tokens"
                found += 1
            t = end
    assert found == long_turns
    whole = scores(policy, rollout)
    assert bool((whole[~mask] == 0).all()) and bool((rollout.old_logp[~mask] == 0).all())
    torch.testing.assert_close(whole[mask], rollout.old_logp[mask], rtol=0, atol=1e-4)


def test_bad_options_name_the_field_and_the_fix():
    with pytest.raises(ValueError, match=r"resample_turns.max_resamples=-1 must be >= 0"):
        TurnResampling(max_resamples=-1).validate()
    with pytest.raises(ValueError, match=r"no progress test"):
        TurnResampling(max_resamples=1, repeated_answer=False).validate()
    with pytest.raises(ValueError, match=r"thinking_intervention.window=0 must be >= 1"):
        ThinkingIntervention(text="wait", window=0).validate()


def test_an_environment_that_cannot_be_rewound_is_counted_and_its_turn_kept(model_path):
    """CannotRestore repeats its answer (turn 1 has no progress) but cannot restore its state: the rewind is counted,
    the turn is kept and the trajectory ends after it (truncated); nothing stops the rollout."""
    options = MultiTurnOptions(environments=f"{HERE}:CannotRestore", resample_turns=TurnResampling(max_resamples=2))
    config = CausalLMPolicyConfig(model=str(model_path), max_new_tokens=5, temperature=0.9, use_chat_template=True,
                                  multi_turn=options)  # fmt: skip
    policy = build_policy(config, "cpu")
    rollout = policy.rollout(ROWS, 2, request=REQUEST)
    assert rollout.counts["environment_errors/rewind"] == 4 and "turns_resampled" not in rollout.counts
    assert rollout.structure["turn_ids"].max(dim=1).values.tolist() == [1] * 4
    assert rollout.structure["truncated"].all()
