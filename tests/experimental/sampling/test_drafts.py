"""iGRPO's draft-then-refine rollout [100] (``draft_refinement``): the drafts are the step's first samples, the
refinement round is guided by the best draft (by reward; the first among equals), and only the refinements form the
groups; then one training step on the arithmetic demo."""

from __future__ import annotations

import json
import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from genalign.policies.base import GUIDANCE_KEY
from genalign.policies.lm.causal import CausalLMPolicy
from genalign.sampling import SAMPLE_SOURCES, Candidate
from genalign.trainer import recipe
from tests.experimental.sampling.test_exits import ids, outcome

GEN = torch.Generator()


def rule(**args):
    return SAMPLE_SOURCES.get("draft_refinement")(tokenizer="builtin:chain-lm", template="\n{draft}\n", **args)


def planned(drafter) -> tuple[int, int]:
    """Plan prompts 0 and 1 (prompt 1 with a hint of its own); returns the refinements per prompt."""
    rows = [{"prompt": "1+2\n"}, {"prompt": "3+4\n", GUIDANCE_KEY: {"hint": "7"}}]
    drafter.choose([Candidate(p, p + 100, row) for p, row in enumerate(rows)], 2, GEN)
    return drafter.samples_per_prompt(3), drafter.refinements


def test_the_best_draft_guides_the_refinement_round():
    drafter = rule(drafts=3)
    assert planned(drafter) == (3, 3)  # 3 drafts per prompt, then group_size = 3 refinements
    drafts = outcome([(0, ids("A:1"), torch.zeros(4), False), (0, ids("A:3"), torch.zeros(4), False),
                      (0, ids("A:4"), torch.zeros(4), False), (1, ids("A:9"), torch.zeros(4), False),
                      (1, ids("A:8"), torch.zeros(4), False), (1, ids("A:7"), torch.zeros(4), False)],
                     rewards=[0.0, 1.0, 1.0, math.nan, math.nan, 0.5], step=1)  # fmt: skip
    drafts.round = 0
    assert drafter.more_samples(drafts) == {0: 3, 1: 3}
    # prompt 0: "A:3" and "A:4" tie at 1.0, the first wins; prompt 1: the only draft with a reward; its own hint stays
    assert drafter.round_guidance(drafts) == {0: {"hint": "\nA:3\n"}, 1: {"hint": "7\nA:7\n"}}
    drafts.round = 1
    assert drafter.more_samples(drafts) == {} and drafter.round_guidance(drafts) == {}


def test_only_the_refinements_form_the_groups_unless_drafts_are_trained():
    drafter = rule(drafts=2)
    planned(drafter)
    samples = [(p, ids("A:1"), torch.zeros(4), False) for p in (0, 0, 1, 1)]  # the drafts, then the refinements
    samples += [(p, ids("A:2"), torch.zeros(4), False) for p in (0, 0, 0, 1, 1, 1)]
    after = outcome(samples, rewards=[0.0, 0.5, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    decision = drafter.after_rewards(after)
    assert decision.keep.tolist() == [False] * 4 + [True] * 6
    assert decision.stats["draft_reward"] == pytest.approx(0.375)
    assert decision.stats["best_draft_reward"] == pytest.approx(0.75)  # 0.5 and 1.0
    assert decision.stats["refinement_reward"] == pytest.approx(0.5)
    assert decision.stats["refinement_gain"] == pytest.approx(-0.25)
    keeping = rule(drafts=2, train_drafts=True)
    planned(keeping)
    assert keeping.after_rewards(after).keep is None


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="template = "):
        SAMPLE_SOURCES.get("draft_refinement")(tokenizer="builtin:chain-lm", template="no draft")
    with pytest.raises(ValueError, match="drafts = 0"):
        rule(drafts=0)


def test_refinements_train_on_the_arithmetic_demo(tmp_path, monkeypatch):
    calls = []
    real_rollout = CausalLMPolicy.rollout

    def spy(self, rows, group_size, **kwargs):
        calls.append((group_size, [dict(row.get(GUIDANCE_KEY) or {}) for row in rows]))
        return real_rollout(self, rows, group_size, **kwargs)

    monkeypatch.setattr(CausalLMPolicy, "rollout", spy)
    config = from_dict(TrainConfig, {
        "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_prompt_tokens": 16, "max_new_tokens": 5},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8, "seed": 0, "digits": 2}}},
        "rewards": [{"fn": "exact_match", "name": "accuracy"}],
        "algorithm": {"group_size": 4, "prompts_per_step": 2, "micro_batch_size": 16,
                      "sample_sources": [{"name": "draft_refinement", "tokenizer": "builtin:arith-lm", "drafts": 2,
                                          "template": " {draft} "}]},
        "eval": {"at_start": False, "every": 0},
        "run": {"output_dir": str(tmp_path / "run"), "max_steps": 1, "progress_bar": False, "num_threads": 1},
    })  # fmt: skip
    recipe.train(config)
    record = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert record["num_samples"] == 2 * 4 and record["sampling/extra_samples"] == 8.0  # refinements only
    (drafts, plain), (one, guided) = calls  # the drafts (2 per prompt), then 4 refinements of each prompt
    assert drafts == 2 and plain == [{}, {}] and one == 1 and len(guided) == 8
    assert all(g["hint"].startswith(" ") and g["hint"].endswith(" ") for g in guided)
    assert len({g["hint"] for g in guided[:4]}) == 1 and len({g["hint"] for g in guided[4:]}) == 1  # one per prompt
