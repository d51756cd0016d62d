"""SKPO [66] in a real multi-turn run: turn trees of the ``skip_connection`` environment (two upstream segments per
prompt, two downstream completions each, the problem shown again before the downstream turn), credited by
``skip_connected``; the gradient of each action's log-probability is −A·m/L with the upstream and downstream
advantages recomputed here from the rewards and the tree."""

from __future__ import annotations

import os
import statistics

import torch

from tests.integration.test_turn_credit_training import model_path  # noqa: F401  (the fixture)
from tests.integration.test_turn_phase_training import train_one_step

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def test_upstream_and_downstream_credit_reach_the_loss(model_path, tmp_path, monkeypatch):  # noqa: F811
    # the tiny model writes no arithmetic: the downstream answer is scored by its length, which varies
    environment = {"name": "skip_connection", "answer_reward": "length_penalty",
                   "answer_args": {"max_length": 16, "unit": "chars"}}  # fmt: skip
    tree = {"enabled": True, "split_turns": [1], "branching": [2], "trees_per_prompt": 2}
    grad, batch = train_one_step(model_path, tmp_path, monkeypatch, environment, [{"fn": "environment"}],
                                 "skip_connected", tree=tree, group_size=4)  # fmt: skip
    mask, depth = batch.mask.double().cpu(), batch["prefix_tree"].depth.cpu()  # depth 0: the upstream turn
    outcome, groups = batch["sample_advantages"].double().cpu(), batch.group_ids.tolist()
    upstream_of = batch["prefix_tree"].node_of_action[:, 0].tolist()  # the root each leaf's first action leads into
    n = len(groups)
    siblings = [[j for j in range(n) if upstream_of[j] == upstream_of[i]] for i in range(n)]
    value = [statistics.fmean(float(outcome[j]) for j in siblings[i]) for i in range(n)]
    expected = torch.zeros_like(grad)
    for i in range(n):
        ups = {upstream_of[j]: value[j] for j in range(n) if groups[j] == groups[i]}  # the prompt's upstreams
        up = (value[i] - statistics.fmean(ups.values())) / (statistics.pstdev(ups.values()) + 1e-6)
        peers = [float(outcome[j]) for j in siblings[i]]
        down = (float(outcome[i]) - statistics.fmean(peers)) / (statistics.pstdev(peers) + 1e-6)
        expected[i] = torch.where(depth[i] == 0, up, down)
    torch.testing.assert_close(grad, -expected * mask / mask.sum(), rtol=1e-4, atol=1e-7)
    assert float(expected.abs().sum()) > 0  # the run carried a signal
