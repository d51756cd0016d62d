"""Turn-level credit in a real training run: two steps of a multi-turn causal-LM run (the tiny model of
tests/policies/lm/test_multi_turn.py, an environment with a per-turn reward), in-process. The gradient of the loss
with respect to each action's log-probability is measured on every update: with ``turn_reward_to_go`` it carries the
per-turn advantage (recomputed here by loops from the batch's turn rewards), not plain GRPO's one advantage per
sample; with StepPO's reading (``turn_baseline`` + ``step_aligned`` + the ``turn`` ratio level) each turn's gradient
is one value and sums to its turn-level advantage (recomputed by loops) times ``L_i / K_i``."""

from __future__ import annotations

import json
import math
import os
import statistics

import pytest
import torch

from genalign.algorithms import LossPlan
from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from genalign.environments import Environment, ModelTurn, Observation, StepResult
from genalign.policies.lm.tiny import build_tiny_causal_lm

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class TurnScored(Environment):
    """Two turns; a turn earns 1 when the model's text has an even number of characters, else 0; the episode reward is
    the mean of the turn rewards."""

    def reset(self, **row) -> None:
        self.earned: list[float] = []

    def step(self, turn: ModelTurn) -> StepResult:
        self.earned.append(float(len(turn.text) % 2 == 0))
        done = turn.index >= 1
        return StepResult(observation=None if done else Observation("next"), done=done, reward=self.earned[-1])

    def reward(self) -> float:
        return sum(self.earned) / len(self.earned)


def expected_turn_advantages(batch, gamma: float) -> torch.Tensor:
    """``turn_reward_to_go`` by loops: z = (r − mean)/(std + 1e-6) over the group's samples with a reward at that
    turn (unbiased std; 0 with fewer than two, or a constant turn), discounted to-go sum added to Â_i."""
    mask, turns, rewards = batch.mask.cpu(), batch["turn_ids"].cpu(), batch["turn_rewards"].double().cpu()
    groups, outcome = batch.group_ids.tolist(), batch["sample_advantages"].double().cpu()
    n, width = mask.shape
    present = [sorted({int(turns[i, t]) for t in range(width) if mask[i, t] > 0}) for i in range(n)]
    z = {}
    for i in range(n):
        for k in present[i]:
            peers = [float(rewards[j, k]) for j in range(n) if groups[j] == groups[i] and k in present[j]
                     and k < rewards.shape[1] and not math.isnan(rewards[j, k])]  # fmt: skip
            mine = float(rewards[i, k]) if k < rewards.shape[1] else math.nan
            spread = statistics.stdev(peers) if len(peers) >= 2 else 0.0
            usable = not math.isnan(mine) and len(peers) >= 2 and spread > 0
            z[i, k] = (mine - statistics.fmean(peers)) / (spread + 1e-6) if usable else 0.0
    out = torch.zeros(n, width, dtype=torch.float64)
    for i in range(n):
        for t in range(width):
            if mask[i, t] > 0:
                k = int(turns[i, t])
                out[i, t] = outcome[i] + sum(gamma ** (j - k) * z[i, j] for j in present[i] if j >= k)
    return out


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return build_tiny_causal_lm(tmp_path_factory.mktemp("models") / "qwen2", vocab_size=96)


def train_recording(model_path, output_dir, monkeypatch, algorithm: dict, multi_turn: dict | None = None) -> list:
    """Two steps of the multi-turn run with ``algorithm`` and ``multi_turn`` options (one micro-batch per step,
    on-policy: every ratio is 1); returns ``(d loss / d logp [n, T], micro-batch)`` of each update."""
    from genalign.trainer.recipe import train

    records = []
    original = LossPlan.__call__

    def recording(self, score, batch, normalizer):
        loss, metrics = original(self, score, batch, normalizer)
        (grad,) = torch.autograd.grad(loss, score.logp, retain_graph=True)
        records.append((grad.detach().double().cpu(), batch))
        return loss, metrics

    monkeypatch.setattr(LossPlan, "__call__", recording)
    config = from_dict(TrainConfig, {
        "policy": {"family": "causal_lm", "model": str(model_path), "max_new_tokens": 4, "max_prompt_tokens": 128,
                   "use_chat_template": True,
                   "multi_turn": {"environments": TurnScored, "max_turns": 2, **(multi_turn or {})}},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "seed": 0, "digits": 1}}},
        "rewards": [{"fn": "environment"}],
        "algorithm": {"group_size": 2, "prompts_per_step": 4, "micro_batch_size": 8, **algorithm},
        "optim": {"lr": 1.0e-3},
        "eval": {"at_start": False, "num_prompts": 2, "batch_size": 2},
        "run": {"output_dir": str(output_dir), "max_steps": 2, "save_every": 0, "sample_every": 0,
                "num_threads": 1, "progress_bar": False},
    })  # fmt: skip
    train(config)
    metrics = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2] and len(records) == 2
    assert all(math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]) for m in metrics)
    return records


def test_per_turn_advantages_reach_the_loss(model_path, tmp_path, monkeypatch):
    records = train_recording(
        model_path, tmp_path, monkeypatch, {"credit": [{"name": "turn_reward_to_go", "gamma": 0.5}]}
    )
    spreads = []
    for grad, batch in records:
        mask = batch.mask.double().cpu()
        tokens = mask.sum()  # token_mean: the loss is −Σ A·ρ / (valid actions), ρ = 1 on-policy
        turn_advantages = expected_turn_advantages(batch, gamma=0.5)
        torch.testing.assert_close(grad, -turn_advantages * mask / tokens, rtol=1e-5, atol=1e-9)
        grpo = -batch["sample_advantages"].double().cpu()[:, None] * mask / tokens  # plain GRPO's gradient
        spreads.append(float((grad - grpo).abs().max() * tokens))  # the largest per-turn term, in advantage units
        per_sample = [{round(float(g), 9) for g, m in zip(row, keep) if m > 0} for row, keep in zip(grad, mask)]
        assert any(len(values) > 1 for values in per_sample), "some sample's turns get different gradients"
    assert min(spreads) > 0.5, spreads  # measured: 0.71 and 1.06


def expected_turn_baseline(batch) -> dict[tuple[int, int], float]:
    """``turn_baseline`` with γ = λ = 1 by loops: G_ik = Σ_{j≥k} u_ij (u = turn reward, 0 where none, + the combined
    reward at the last turn) minus the mean of G over the group's samples that reached turn k."""
    mask, turns, rewards = batch.mask.cpu(), batch["turn_ids"].cpu(), batch["turn_rewards"].double().cpu()
    groups, outcome = batch.group_ids.tolist(), batch["combined_reward"].double().cpu()
    present = [sorted({int(turns[i, t]) for t in range(mask.shape[1]) if mask[i, t] > 0}) for i in range(len(groups))]
    returns = {}
    for i, ks in enumerate(present):
        for k in ks:
            earned = [0.0 if math.isnan(rewards[i, j]) else float(rewards[i, j]) for j in ks if j >= k]
            returns[i, k] = sum(earned) + float(outcome[i])
    return {
        (i, k): returns[i, k] - statistics.fmean(returns[j, k] for j in range(len(groups))
                                                 if groups[j] == groups[i] and k in present[j])
        for i, k in returns
    }  # fmt: skip


def test_steppo_gives_each_turn_its_turn_level_advantage(model_path, tmp_path, monkeypatch):
    """(The tiny model fills every turn's 4 tokens here, so the equal-step weight L_i/(K_i·L_ik) is 1 in this run; the
    weighting itself is checked by hand in tests/experimental/credit/test_turns.py.)"""
    algorithm = {"credit": ["turn_baseline", "step_aligned"], "ratio_level": "turn"}
    records = train_recording(model_path, tmp_path, monkeypatch, algorithm)
    for grad, batch in records:
        mask, turns = batch.mask.double().cpu(), batch["turn_ids"].cpu()
        tokens = mask.sum()
        for (i, k), advantage in expected_turn_baseline(batch).items():
            in_turn = (turns[i] == k) & (mask[i] > 0)
            steps = len({int(x) for x in turns[i][mask[i] > 0]})
            share = mask[i].sum() / steps  # L_i / K_i
            total = grad[i][in_turn].sum() * tokens  # the turn's gradient, in advantage units (ratio 1)
            assert float(total) == pytest.approx(-advantage * float(share), abs=1e-6), (i, k)
            assert len({round(float(g), 9) for g in grad[i][in_turn]}) == 1  # one advantage per step


def test_turn_level_trees_train_with_tree_grpo(model_path, tmp_path, monkeypatch):
    """Tree-GRPO [165] on turn-level trees: 2 trees × 2 branches per row, branching before turn 1; the trained batch
    carries the sampling tree (siblings share turn 0 and its answer) and tree_grpo's gradient is −(A_i + intra_i)·m/L
    with intra_i the leaf's outcome normalised within its own tree (recomputed here by loops)."""
    tree = {"tree": {"enabled": True, "split_turns": [1], "branching": [2], "trees_per_prompt": 2}}
    records = train_recording(
        model_path, tmp_path, monkeypatch, {"group_size": 4, "micro_batch_size": 16, "credit": ["tree_grpo"]}, tree
    )
    for grad, batch in records:
        mask, outcome = batch.mask.double().cpu(), batch["sample_advantages"].double().cpu()
        prefix_tree = batch["prefix_tree"]
        roots = prefix_tree.node_of_action[:, 0].tolist()
        assert int(prefix_tree.depth.max()) == 1 and len(set(roots)) == len(roots) // 2
        intra = []
        for i, root in enumerate(roots):
            peers = [float(outcome[j]) for j in range(len(roots)) if roots[j] == root]
            intra.append((float(outcome[i]) - statistics.fmean(peers)) / (statistics.pstdev(peers) + 1e-6))
        expected = -(outcome + torch.tensor(intra, dtype=torch.float64))[:, None] * mask / mask.sum()
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-7)


def test_triage_adds_each_turns_role_reward_in_training(model_path, tmp_path, monkeypatch):
    """TRIAGE [8]: TurnScored calls no tool, so the rule-based judge types turn 0 decisive (reward above 0) or
    infrastructure (no call) and the last turn decisive (the episode ends) or regression (a reward drop); the gradient
    is −(A_i + r_role)·m/L on each turn's actions (the judge's rules by hand: tests/environments/test_judges.py)."""
    records = train_recording(model_path, tmp_path, monkeypatch, {"credit": ["triage"]})
    constants = {1: 0.1, 2: 0.2, 3: -0.1, 4: -0.3}
    for grad, batch in records:
        mask, turns = batch.mask.double().cpu(), batch["turn_ids"].cpu()
        roles, outcome = batch["turn_roles"].cpu(), batch["sample_advantages"].double().cpu()
        assert set(roles[:, 0].tolist()) <= {1, 3} and set(roles[:, 1].tolist()) <= {1, 4}
        process = torch.tensor([[constants[int(r)] for r in row[:2]] for row in roles], dtype=torch.float64)
        expected = -(outcome[:, None] + process.gather(1, turns.clamp(max=1))) * mask / mask.sum()
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-7)


def test_triage_with_the_llm_segment_judge_trains(model_path, tmp_path, monkeypatch):
    """TRIAGE [8] with its LLM judge (``llm_roles``, a fake endpoint that calls every turn infrastructure): the judge
    may demote the rule roles but not lift a regression, so every role is infrastructure (3) or regression (4), and
    the gradient is −(A_i + r_role)·m/L as with the rule-based judge."""
    from tests.environments.test_llm_judge import _Judge

    server = _Judge()
    try:
        judge = {"name": "llm_roles", "base_url": server.url, "model": "judge", "retries": 0}
        records = train_recording(model_path, tmp_path, monkeypatch, {"credit": ["triage"]}, {"segment_judge": judge})
    finally:
        server.server.shutdown()
        server.server.server_close()
    assert server.requests and all("TURN:" in request for request in server.requests)
    constants = {3: -0.1, 4: -0.3}
    for grad, batch in records:
        mask, turns = batch.mask.double().cpu(), batch["turn_ids"].cpu()
        roles, outcome = batch["turn_roles"].cpu(), batch["sample_advantages"].double().cpu()
        assert set(roles[:, :2].flatten().tolist()) <= {3, 4}
        process = torch.tensor([[constants[int(r)] for r in row[:2]] for row in roles], dtype=torch.float64)
        expected = -(outcome[:, None] + process.gather(1, turns.clamp(max=1))) * mask / mask.sum()
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-7)


def test_t2po_rollout_control_trains(model_path, tmp_path, monkeypatch):
    """T²PO [171]: turn resampling (Scripted answers every turn alike and ends after 3 turns, so turn 1 repeats turn
    0's answer and is resampled once, the bound) and the thinking intervention, with the credit side's gate; the
    trained tokens are re-scored exactly (on-policy gradient −A·m/L, the gate keeping every turn at threshold 0)."""
    control = {"environments": {"name": "tests.policies.lm.scripted_environments:Scripted", "reward": None},
               "max_turns": 3, "resample_turns": {"max_resamples": 1},
               "thinking_intervention": {"text": " wait", "window": 1, "threshold": 0.5}}  # fmt: skip
    algorithm = {"credit": [{"name": "turn_progress_gate", "threshold": 0.0}]}
    records = train_recording(model_path, tmp_path, monkeypatch, algorithm, control)
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(m["rollout/turns_resampled"] == 8 for m in metrics), metrics  # 8 trajectories, once each
    for grad, batch in records:
        mask = batch.mask.double().cpu()
        expected = -batch["sample_advantages"].double().cpu()[:, None] * mask / mask.sum()
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-7)


def test_reward_goals_condition_multi_turn_groups(model_path, tmp_path, monkeypatch):
    """RC-GRPO [128] on multi-turn rollouts: reward_goals draws each group's two halves under two goal texts (a
    guidance hint in the prompt); every training rollout's prompts carry the goal of their round, and the step trains
    on groups mixing both."""
    from genalign.policies.lm import causal

    rollouts = []
    original = causal.multi_turn_rollout

    def recording(policy, rows, group_size, mode, request, family):
        rollout = original(policy, rows, group_size, mode, request, family)
        if mode == "train":
            ids, mask = rollout.per_sample["prompt_ids"], rollout.per_sample["prompt_mask"]
            rollouts.append([policy.tokenizer.decode(i[m > 0]).rsplit("assistant", 1)[0] for i, m in zip(ids, mask)])
        return rollout

    monkeypatch.setattr(causal, "multi_turn_rollout", recording)
    algorithm = {"group_size": 4, "micro_batch_size": 16,
                 "sample_sources": [{"name": "reward_goals", "goals": ["answer", "what"], "template": " {goal}"}]}  # fmt: skip
    records = train_recording(model_path, tmp_path, monkeypatch, algorithm)
    assert len(rollouts) == 4  # 2 steps × one round per goal
    for goal, prompts in zip(["answer", "what"] * 2, rollouts, strict=True):
        assert len(prompts) == 8 and all(prompt.rstrip(" ;:").endswith(goal) for prompt in prompts), prompts
    assert all(len(batch.group_ids) == 16 for _, batch in records)


def test_turn_critic_fits_on_the_first_step_and_values_the_second(model_path, tmp_path, monkeypatch):
    """turn-PPO's learned critic [229] (``turn_critic``): step 1 has no fitted probe, so its gradient is
    turn_baseline's (−A·m/L, recomputed by loops); step 2's values come from the probe fitted on step 1's (state,
    return) pairs, so its gradient is the rule's advantages under that probe (refitted here from the recorded batch)
    and no longer turn_baseline's."""
    from genalign.experimental.credit.turn_critic import TurnCritic

    options = {"gamma": 1.0, "lam": 1.0, "projection_dim": 8}
    records = train_recording(model_path, tmp_path, monkeypatch, {"credit": [{"name": "turn_critic", **options}]})
    (first_grad, first), (second_grad, second) = records
    mask, turns = first.mask.double().cpu(), first["turn_ids"].cpu()
    for (i, k), advantage in expected_turn_baseline(first).items():
        in_turn = (turns[i] == k) & (mask[i] > 0)
        torch.testing.assert_close(
            first_grad[i][in_turn] * mask.sum(), torch.full_like(first_grad[i][in_turn], -advantage)
        )
    critic = TurnCritic(**options)
    critic(torch.zeros_like(first.mask), first)  # the fit of step 1's pairs
    expected = critic(torch.zeros_like(second.mask), second).double().cpu()  # [n, T] under that probe
    mask = second.mask.double().cpu()
    assert torch.isfinite(second_grad).all() and critic.stats["turn_critic_fitted"] == 1.0
    torch.testing.assert_close(second_grad, -expected * mask / mask.sum(), rtol=1e-4, atol=1e-7)
    baseline = {key: value for key, value in expected_turn_baseline(second).items()}
    differs = [abs(float(expected[i][(second["turn_ids"][i].cpu() == k) & (mask[i] > 0)][0]) - value)
               for (i, k), value in baseline.items()]  # fmt: skip
    assert max(differs) > 1e-3, differs  # the probe's values, not the group's
