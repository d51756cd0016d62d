"""JustGRPO's left-to-right likelihood [35]: each answer token scored with later positions masked."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.policies.dlm.likelihood import LIKELIHOOD_PROXIES

MASK = 3  # real tokens 0..2


def recording_model(calls: list[torch.Tensor]):
    """Logits whose log-softmax at each position is a known function of the number of visible answer tokens.

    At position ``q`` the logit of token 0 is ``v`` (visible answer tokens in the row), the others 0, so
    ``log p(0) = v − log(e^v + 2)``. Records every input.
    """

    def model_fn(ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        calls.append(ids.clone())
        visible = (ids[:, 1:] != MASK).sum(dim=1).float()  # [B] answer tokens visible (prompt length 1)
        logits = torch.zeros(*ids.shape, 4)
        logits[..., 0] = visible[:, None]
        return logits

    return model_fn


def test_each_token_is_scored_with_the_prefix_visible_and_the_rest_masked():
    calls: list[torch.Tensor] = []
    answer = torch.tensor([[0, 0, 0]])
    out = LIKELIHOOD_PROXIES.get("left_to_right")(
        recording_model(calls), torch.tensor([[2]]), answer, torch.ones(1, 3), mask_id=MASK, seeds=torch.tensor([0])
    )
    (inputs,) = calls  # one forward over the 3 noisy copies
    assert inputs.tolist() == [[2, MASK, MASK, MASK], [2, 0, MASK, MASK], [2, 0, 0, MASK]]
    # token j sees j answer tokens: log p = j − log(e^j + 2), hand-computed
    expected = [-math.log(3.0), 1 - math.log(math.e + 2), 2 - math.log(math.e**2 + 2)]  # -1.0986, -0.5514, -0.2395
    assert out.logp[0].tolist() == pytest.approx(expected, abs=1e-5)
    assert out.num_forward == 3 and out.mask.tolist() == [[1.0, 1.0, 1.0]]


def test_blocks_score_their_tokens_together_and_ignore_the_rollout_order_and_seed():
    calls: list[torch.Tensor] = []
    proxy = LIKELIHOOD_PROXIES.get("left_to_right")
    kwargs = dict(mask_id=MASK, block_size=2, decode_step=torch.tensor([[3, 2, 1, 0]]))
    out = proxy(recording_model(calls), torch.tensor([[2]]), torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 4),
                seeds=torch.tensor([0]), **kwargs)  # fmt: skip
    assert calls[0].tolist() == [[2, MASK, MASK, MASK, MASK], [2, 0, 0, MASK, MASK]]
    first, second = -math.log(3.0), 2 - math.log(math.e**2 + 2)
    assert out.logp[0].tolist() == pytest.approx([first, first, second, second], abs=1e-5)
    assert out.num_forward == 2
    again = proxy(recording_model([]), torch.tensor([[2]]), torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 4),
                  seeds=torch.tensor([99]), **kwargs)  # fmt: skip
    assert torch.equal(out.logp, again.logp)
    with pytest.raises(ValueError, match="block_size=0 must be a positive integer"):
        proxy(recording_model([]), torch.tensor([[2]]), torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 4),
              seeds=torch.tensor([0]), mask_id=MASK, block_size=0)  # fmt: skip
