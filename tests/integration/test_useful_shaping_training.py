"""The reward-shaping and advantage options of the useful-seeds batch train the demos through the config: the LM demo
for the shapers, combiners, estimators and the phase ratio level (GRPO-λ [291], GRSP [112], the polychromic objective
[242], POISE [257], DRPO [25], RiskPO [256], F-GRPO [303]); the shapes VLM through ``evidence_zoom`` with per-turn
rewards for TAPO [9] (the tiny VLM cannot write tool calls, so a scripted subclass picks each turn's crop from the
sampled text). CAPO [57], MedLoc-R1 [121] and LaSeR [208] train in tests/integration/test_method_catalogue.py."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from genalign.config import load_config
from genalign.data.vlm_tasks import shapes_vqa_rows
from genalign.environments import EvidenceZoom, ModelTurn, StepResult
from genalign.policies.base import RolloutRequest
from genalign.policies.lm.multi_turn_options import MultiTurnOptions
from genalign.policies.vlm.config import VLMPolicyConfig
from genalign.policies.vlm.policy import build_policy
from genalign.trainer import train
from tests.integration.test_method_catalogue import demo_config

pytestmark = pytest.mark.heavy(cpu_s=15)  # scheduled first (tests/conftest.py)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
TWO_REWARDS = (
    "rewards=[{fn: exact_match, name: accuracy}, {fn: length_penalty, name: length, weight: 0.1, args: {unit: chars}}]"
)

#: id -> overrides of the demo (one step, two minibatches; POISE takes two steps: the second uses the fitted probe)
RUNS: dict[str, list[str]] = {
    "grpo_lambda": [TWO_REWARDS, "algorithm.reward_shaping=[{name: correctness_gated_length, level: 0.5}]"],
    "grsp": ["algorithm.reward_shaping=[{name: segment_penalty, coef: 0.2}]"],
    "polychromic": ["algorithm.reward_shaping=[{name: polychromic_sets, set_size: 2}]", "algorithm.advantage=dr_grpo"],
    "poise": ["algorithm.reward_shaping=[probe_baseline]", "algorithm.advantage=reinforce", "run.max_steps=2"],
    "drpo": ["rewards=[{fn: exact_match, name: accuracy}, {fn: row_label, name: domain, weight: 0.0, "
             "args: {column: operator}}]", "algorithm.reward_combination={name: domain_scaled, domain_column: 1}",
             "algorithm.advantage=dr_grpo"],
    "riskpo_bundles": ["algorithm.advantage={name: mixed_var, bundle_size: 2}"],
    "fgrpo": [TWO_REWARDS, "policy.probes.block_markers=['0']", "algorithm.ratio_level=phase",
              "algorithm.credit=[{name: role_segments, role_rewards: [[0], [1]]}]"],
    "polychromic_vine_tree": ["policy.tree.enabled=true", "policy.tree.split_positions=[1, 2]",
                              "policy.tree.branching=[2, 2]", "algorithm.credit=[polychromic_vine]"],
    "fgrpo_ranked_list_rewards": [  # the toy model writes digits: "0" stands in for the marker opening the ranking
        "rewards=[{fn: list_coverage, name: coverage, args: {column: answer, separator: ' ', marker: '0', "
        "part: before}}, {fn: ranking_utility, name: utility, args: {column: answer, separator: ' ', marker: '0', "
        "part: after}}]", "policy.probes.block_markers=['0']", "algorithm.ratio_level=phase",
        "algorithm.credit=[{name: role_segments, role_rewards: [[0], [1]]}]"],
}  # fmt: skip


def metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("overrides", list(RUNS.values()), ids=list(RUNS))
def test_each_option_trains_the_lm_demo(overrides, tmp_path):
    torch.manual_seed(0)
    result = train(demo_config(["run.max_steps=1", *overrides], tmp_path))
    records = metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2] if "run.max_steps=2" in overrides else [1]
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in records)
    assert 0.0 <= result["eval/accuracy"] <= 1.0


def crop_call(box: list[int]) -> str:
    return f'<tool_call>{{"name": "crop_image", "arguments": {{"box": {box}, "zoom": 1.0}}}}</tool_call>'


class ScriptedEvidence(EvidenceZoom):
    """``evidence_zoom`` whose first turn crops a box chosen from the sampled text (its length's parity: the evidence
    box itself, or the opposite corner of the image), so the group's tool rewards differ; later turns end."""

    def step(self, turn: ModelTurn) -> StepResult:
        if turn.index > 0:
            return self.rewarded(StepResult(record=self.call_tools(""), done=True))
        box = [round(v) for v in self.evidence] if len(turn.text) % 2 == 0 else [40, 40, 48, 48]
        record = self.call_tools(crop_call(box))
        return self.rewarded(StepResult(record=record, done=False))


def test_tool_call_evidence_rewards_train_the_vlm_through_turn_credit(tmp_path):
    overrides = [
        "policy.multi_turn.environments=tests.integration.test_useful_shaping_training:ScriptedEvidence",
        "data.train.args.kinds=[ground]", "data.eval.args.kinds=[ground]",
        "rewards=[{fn: box_iou, name: accuracy}]", "algorithm.credit=[{name: turn_reward_to_go, gamma: 1.0}]",
        "algorithm.prompts_per_step=2", "algorithm.group_size=4", "algorithm.micro_batch_size=8",
        "policy.max_new_tokens=6", "data.train.args.size=8", "data.eval.args.size=2", "eval.num_prompts=2",
        "eval.batch_size=2", "eval.at_start=false", "run.max_steps=1", "run.sample_every=0",
        f"run.output_dir={tmp_path / 'run'}",
    ]  # fmt: skip
    torch.manual_seed(0)
    train(load_config(ROOT / "configs" / "demo_shapes_vlm_zoom.yaml", overrides))
    (record,) = [r for r in metrics(tmp_path / "run" / "metrics.jsonl") if "rollout/turns" in r]
    assert record["step"] == 1 and math.isfinite(record["loss"]) and math.isfinite(record["grad_norm"])
    assert record["rollout/tools/ok"] == 8  # one crop per trajectory, each rewarded by the environment


def test_the_crop_rewards_reach_the_rollouts_turn_rewards():
    torch.manual_seed(0)
    options = MultiTurnOptions(environments="tests.integration.test_useful_shaping_training:ScriptedEvidence")
    config = VLMPolicyConfig(min_pixels=256, max_pixels=2304, max_new_tokens=5, temperature=2.0, multi_turn=options)
    policy = build_policy(config, "cpu")
    rows = shapes_vqa_rows(2, 0, kinds=["ground"])
    rollout = policy.rollout(rows, 4, request=RolloutRequest(structure=frozenset({"turn_ids", "turn_rewards"})))
    rewards = rollout.structure["turn_rewards"]  # [N, K]
    assert set(rewards[:, 0].tolist()) == {0.0, 1.0}  # the crop turn: the evidence box earns 1, the far corner 0
    assert torch.isnan(rewards[:, 1]).all()  # the closing turn made no crop call: no tool reward
