"""Self-Paced GRPO [64] progressive combiner and its competence state; MV-GRPO [63] multi-view combiner."""

import json

import pytest
import torch

from genalign.algorithms import REWARD_COMBINERS, Stateful, bind_option
from genalign.experimental.combiners.paced import SelfPaced, stage_emphasis

NAN = float("nan")


def test_stage_emphasis_moves_along_the_stages():
    thresholds = [0.2, 0.5, 0.8]
    torch.testing.assert_close(stage_emphasis(0.0, thresholds, 0.1), torch.tensor([1.0, 0.1, 0.1], dtype=torch.float64))
    # u = 1 + (0.65 - 0.5) / 0.3 = 1.5: half on stage 1, half on stage 2
    torch.testing.assert_close(
        stage_emphasis(0.65, thresholds, 0.0), torch.tensor([0.0, 0.5, 0.5], dtype=torch.float64)
    )
    torch.testing.assert_close(stage_emphasis(0.9, thresholds, 0.1), torch.tensor([0.1, 0.1, 1.0], dtype=torch.float64))


def test_self_paced_weights_follow_competence():
    rewards = torch.tensor([[0.2, 1.0, 0.0], [0.4, 0.0, 1.0]])
    groups, weights = torch.tensor([0, 0]), torch.tensor([1.0, 2.0, 1.0])
    combine = REWARD_COMBINERS.get("self_paced")
    # batch-mean competence of column 0 = 0.3 -> u = 0.6 between [0, 0.5, 1]: emphasis [0.4, 0.6, 0] (min_weight 0)
    combined, stats = combine(rewards, groups, weights, min_weight=0.0)
    torch.testing.assert_close(combined, torch.tensor([0.4 * 0.2 + 1.2 * 1.0, 0.4 * 0.4 + 1.0 * 0.0]))
    assert stats["self_paced/competence"] == pytest.approx(0.3)
    late, _ = combine(rewards, groups, weights, competence=1.0, min_weight=0.0)
    torch.testing.assert_close(late, torch.tensor([0.0, 1.0]))  # only the last stage


def test_self_paced_rejects_bad_thresholds():
    with pytest.raises(ValueError, match="thresholds"):
        REWARD_COMBINERS.get("self_paced")(torch.zeros(2, 2), torch.tensor([0, 0]), [1.0, 1.0], thresholds=[0.5, 0.2])


def test_competence_state_is_an_ema_and_round_trips_through_json():
    state = SelfPaced(competence_reward=1, competence_momentum=0.5)
    assert state.competence is None
    state.update(torch.tensor([[0.0, 0.2], [0.0, NAN]]))
    state.update(torch.tensor([[0.0, 0.6], [0.0, 1.0]]))
    assert state.competence == pytest.approx(0.5 * 0.2 + 0.5 * 0.8)
    restored = SelfPaced()
    restored.load_state_dict(json.loads(json.dumps(state.state_dict())))
    assert restored.competence == state.competence and restored.competence_reward == 1


def test_the_trainer_carries_a_state_only_for_self_paced():
    state = bind_option(REWARD_COMBINERS, "self_paced", {"competence_reward": 1, "competence_momentum": 0.3})
    assert (state.competence_reward, state.momentum) == (1, 0.3)
    assert isinstance(state, Stateful)
    assert not isinstance(bind_option(REWARD_COMBINERS, "weighted_sum", {}), Stateful)
    with pytest.raises(ValueError, match="competence_momentum"):
        REWARD_COMBINERS.get("self_paced")(torch.zeros(2, 2), torch.tensor([0, 0]), [1.0, 1.0], competence_momentum=1.0)


def test_multi_view_is_the_mean_of_per_view_group_z_scores():
    rewards = torch.tensor([[1.0, 0.0, 5.0], [0.0, 0.0, 7.0], [0.5, 1.0, 9.0], [0.5, 0.0, 9.0]])
    groups = torch.tensor([0, 0, 1, 1])
    combined, _ = REWARD_COMBINERS.get("multi_view")(rewards, groups, [1.0, 1.0, 0.0], eps=0.0)
    r = 1 / (2**0.5)  # z-score of a two-sample group (unbiased std)
    # group 0: view 0 separates (+r, -r), view 1 constant (0); group 1: view 0 constant, view 1 (+r, -r); column 2 off
    torch.testing.assert_close(combined, torch.tensor([r / 2, -r / 2, r / 2, -r / 2]))
    with pytest.raises(ValueError, match="weights"):
        REWARD_COMBINERS.get("multi_view")(rewards, groups, [0.0, 0.0, 0.0])
