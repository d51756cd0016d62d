"""Segment-state credit rules against hand values: SPO-chain Monte-Carlo segment advantages [41], belief progress
[194], SPAE step potential [193]; config acceptance on the arith-lm causal LM."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.config import from_dict
from genalign.config.core import ConfigError
from genalign.config.schema import TrainConfig
from genalign.experimental.credit.segments import step_potentials

F64 = torch.float64
NAN = float("nan")
# sample 0: three segments over five actions; sample 1: two segments, the last two actions are padding
SEGMENTS = torch.tensor([[0, 0, 1, 1, 2], [0, 1, 1, 1, 1]])
MASK = torch.tensor([[1.0, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
GROUPS = torch.tensor([0, 0])


def credit(adv=(1.0, -1.0), **structure) -> StepBatch:
    logp = structure.pop("logp", None)
    return StepBatch(
        sample_advantages=torch.tensor(adv, dtype=F64),
        mask=MASK,
        group_ids=GROUPS,
        behaviour_logp=logp,
        segment_ids=SEGMENTS,
        **structure,
    )


def apply(name: str, inputs: StepBatch, incoming=None, **hp) -> torch.Tensor:
    incoming = inputs["sample_advantages"][:, None].expand(MASK.shape).clone() if incoming is None else incoming
    return CREDIT_RULES.get(name)(incoming, inputs, **hp)


def test_segment_mc_gives_value_differences_to_cutpoint_tokens():
    # V(s_k): sample 0 = 0.5, 0.75, 0.25, 1.0 -> segment gains 0.25, -0.5, 0.75
    #         sample 1 = 0.5, 0.0, 0.0, (none) -> gains -0.5, 0.0 (the NaN state is past its last segment)
    values = torch.tensor([[0.5, 0.75, 0.25, 1.0], [0.5, 0.0, 0.0, NAN]])
    probs = torch.tensor([[0.5, 0.95, 0.2, 0.99, 0.1], [0.5, 0.5, 0.5, 0.5, 0.5]])
    inputs = credit(segment_values=values, logp=probs.log().to(F64))
    # probability mask: tokens with p >= 0.9 (actions 1 and 3 of sample 0) are not cutpoints and get 0
    expected = torch.tensor([[0.25, 0.0, -0.5, 0.0, 0.75], [-0.5, 0.0, 0.0, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(apply("segment_mc", inputs), expected)
    everywhere = torch.tensor([[0.25, 0.25, -0.5, -0.5, 0.75], [-0.5, 0.0, 0.0, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(apply("segment_mc", inputs, probability_mask=False), everywhere)
    # the rule replaces the incoming advantages: the same result from any incoming tensor
    torch.testing.assert_close(apply("segment_mc", inputs, incoming=torch.full((2, 5), 9.0, dtype=F64)), expected)
    assert CREDIT_RULES.meta("segment_mc")["replaces"]


def test_belief_progress_adds_the_change_in_answer_probability_per_segment():
    probe = torch.zeros(2, 4, 3)
    probe[0, :, 0] = torch.tensor([0.1, 0.4, 0.3, 0.9]).log()  # b = 0.1 -> 0.4 -> 0.3 -> 0.9: progress 0.3, -0.1, 0.6
    probe[1, :, 0] = torch.tensor([0.5, 0.5, 0.25, NAN]).log()  # progress 0.0, -0.25
    inputs = credit(answer_probe=probe)
    out = apply("belief_progress", inputs, coef=0.5)
    expected = torch.tensor([[1.15, 1.15, 0.95, 0.95, 1.3], [-1.0, -1.125, -1.125, -1.0, -1.0]], dtype=F64)
    torch.testing.assert_close(out, expected)  # padding keeps the incoming -1
    log_scale = apply("belief_progress", inputs, scale="log")  # log(0.4 / 0.1) = log 4 for segment 0
    assert math.isclose(float(log_scale[0, 0]), 1.0 + math.log(4.0), rel_tol=1e-6)


def test_step_potential_shapes_by_potential_gains_and_damps_after_saturation():
    # Acc (mean answer-token probability) and entropy per state; Conf = exp(-entropy)
    # state 0: Acc 0, Conf 1 -> Φ = -1; state 1: Acc 0.5, Conf 1 -> Φ = 0.75 + 0.25 - 1 = 0;
    # states 2, 3: Acc 1, Conf 1 -> Φ = 1.5 + 0.5 - 1 = 1 (> τ = 0.9: saturated after step 1)
    probe = torch.zeros(2, 4, 3)
    probe[:, :, 1] = torch.tensor([0.0, 0.5, 1.0, 1.0])
    assert torch.allclose(step_potentials(probe)[0], torch.tensor([-1.0, 0.0, 1.0, 1.0]))
    inputs = StepBatch(
        sample_advantages=torch.tensor([2.0, -2.0], dtype=F64),
        mask=torch.ones(2, 5),
        group_ids=GROUPS,
        segment_ids=torch.tensor([[0, 0, 1, 1, 2]] * 2),
        answer_probe=probe,
    )
    out = CREDIT_RULES.get("step_potential")(torch.tensor([[2.0] * 5, [-2.0] * 5], dtype=F64), inputs)
    # step potentials (Φ after each step) 0, 1, 1 -> ΔΦ = 0 (first step), 1, 0; step 2 comes after saturation
    # A > 0: 2, 2, 2 + 0.2·1, 2 + 0.2·1, 2·(1 - 0.5);  A < 0: -2, -2, -2 + 0.2, -2 + 0.2, -2·(1 + 0.5)
    expected = torch.tensor([[2.0, 2.0, 2.2, 2.2, 1.0], [-2.0, -2.0, -1.8, -1.8, -3.0]], dtype=F64)
    torch.testing.assert_close(out, expected)


def test_segment_rules_name_the_missing_structure():
    with pytest.raises(ValueError, match="segment_values"):
        apply("segment_mc", credit(logp=torch.zeros(2, 5, dtype=F64)))
    with pytest.raises(ValueError, match="answer_probe"):
        apply("belief_progress", credit())


def _config(rule: str, **policy) -> TrainConfig:
    return from_dict(
        TrainConfig,
        {
            "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "use_chat_template": False, **policy},
            "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8}}},
            "rewards": [{"fn": "exact_match"}],
            "algorithm": {"group_size": 4, "prompts_per_step": 2, "credit": [rule]},
        },
    )


@pytest.mark.parametrize("rule", ["segment_mc", "belief_progress", "step_potential"])
def test_a_causal_lm_config_accepts_the_rule(rule):
    assert [r.name for r in _config(rule).algorithm.credit] == [rule]
    needs = _config(rule).algorithm.needs()
    assert "segment_ids" in needs


def test_a_family_without_the_probes_is_rejected():
    with pytest.raises(ConfigError, match="answer_probe"):
        from_dict(
            TrainConfig,
            {
                "policy": {"family": "diffusion_lm", "model": "builtin:arith-dlm"},
                "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8}}},
                "rewards": [{"fn": "exact_match"}],
                "algorithm": {"group_size": 4, "prompts_per_step": 2, "credit": ["belief_progress"]},
            },
        )
