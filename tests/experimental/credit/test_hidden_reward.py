"""Token Hidden Reward [270]: each token's first-order influence on the likelihood of the correct responses, and the
sign-based reweighting towards exploitation or exploration, against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.experimental.credit.hidden_reward import token_hidden_rewards

F64 = torch.float64
MASK = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
IDS = torch.tensor([[5, 7], [5, 9], [5, 7]])  # samples 0 and 1 are correct (A > 0), sample 2 is wrong
ADV = torch.tensor([1.0, 1.0, -1.0], dtype=F64)
PROBS = torch.full((3, 2), 0.5)  # 1 − p = 0.5 everywhere


def hidden(second_correct_first_token: list[float]) -> torch.Tensor:
    return torch.tensor(
        [[[1.0, 0.0], [0.0, 1.0]], [second_correct_first_token, [1.0, 1.0]], [[-1.0, 0.0], [0.0, 2.0]]]
    )  # [3, 2, 2]


def batch(h: torch.Tensor) -> StepBatch:
    return StepBatch(mask=MASK, sample_advantages=ADV, hidden=h, action_ids=IDS, behaviour_logp=PROBS.log())


def thr(h: torch.Tensor) -> torch.Tensor:
    per_action = ADV[:, None].expand(3, 2)
    return token_hidden_rewards(h, IDS, PROBS, per_action, MASK > 0, ADV > 0)


def test_the_hidden_reward_sums_the_same_token_influence_on_the_correct_responses():
    # THR_it = A_i·(1 − p_it)·Σ_{other correct tokens with the same id} (1 − p_js)·⟨h_it, h_js⟩
    # (0,0) id 5 with (1,0): 1·0.5·0.5·⟨[1,0],[1,0]⟩ = 0.25; (1,0) likewise; (0,1) id 7 and (1,1) id 9: no other
    # correct token with that id -> 0; (2,0) id 5 with (0,0), (1,0): −1·0.5·0.5·(−1 − 1) = 0.5;
    # (2,1) id 7 with (0,1): −1·0.5·0.5·⟨[0,2],[0,1]⟩ = −0.5
    torch.testing.assert_close(
        thr(hidden([1.0, 0.0])), torch.tensor([[0.25, 0.0], [0.25, 0.0], [0.5, -0.5]], dtype=F64)
    )
    # with the second correct sample's state opposite, the two correct id-5 tokens pull against each other and the
    # wrong sample's id-5 token influences them by 0.5·(−1) + 0.5·(+1) = 0 in total
    torch.testing.assert_close(
        thr(hidden([-1.0, 0.0])), torch.tensor([[-0.25, 0.0], [-0.25, 0.0], [0.0, -0.5]], dtype=F64)
    )


def test_reweighting_amplifies_positive_and_weakens_negative_hidden_rewards():
    rule = CREDIT_RULES.get("token_hidden_reward")
    incoming = ADV[:, None].expand(3, 2).clone()
    exploit = rule(incoming, batch(hidden([1.0, 0.0])), rho=0.5)  # weights 1 + 0.5·sign(THR)
    torch.testing.assert_close(exploit, torch.tensor([[1.5, 1.0], [1.5, 1.0], [-1.5, -0.5]], dtype=F64))
    explore = rule(incoming, batch(hidden([-1.0, 0.0])), rho=-0.5)  # the reverse: negative THR amplified
    torch.testing.assert_close(explore, torch.tensor([[1.5, 1.0], [1.5, 1.0], [-1.0, -1.5]], dtype=F64))
    with pytest.raises(ValueError, match="rho"):
        rule(incoming, batch(hidden([1.0, 0.0])), rho=2.0)


def test_without_a_correct_response_every_weight_is_one():
    rule = CREDIT_RULES.get("token_hidden_reward")
    inputs = batch(hidden([1.0, 0.0])).with_values(sample_advantages=-ADV.abs())
    incoming = torch.full((3, 2), -1.0, dtype=F64)
    torch.testing.assert_close(rule(incoming, inputs), incoming)


def test_only_tokens_with_the_same_id_interact():
    ids = IDS.clone()
    ids[2, 1] = 6  # no correct token has id 6, although its state [0, 2] is aligned with the correct id-7 token's
    per_action = ADV[:, None].expand(3, 2)
    values = token_hidden_rewards(hidden([1.0, 0.0]), ids, PROBS, per_action, MASK > 0, ADV > 0)
    torch.testing.assert_close(values, torch.tensor([[0.25, 0.0], [0.25, 0.0], [0.5, 0.0]], dtype=F64))
