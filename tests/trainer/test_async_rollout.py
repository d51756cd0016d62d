"""Asynchronous off-policy rollouts: the version schedule by hand, config errors, and on the toy policy (through the
CLI, a real rollout process): staleness as scheduled, and a killed-and-resumed run equal to the uninterrupted one."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from genalign.config import ConfigError
from genalign.config.schema import AlgorithmConfig, AsyncRolloutConfig
from genalign.policies.base import ScoreRequest
from genalign.trainer.async_rollout import rollout_version
from tests import prepared_python
from tests.trainer.test_recipe import metrics, run_cli, train_in_process, without_times, write_config

pytestmark = pytest.mark.heavy(cpu_s=75)  # scheduled first (tests/conftest.py)

ASYNC = {"clip": "off_policy", "async_rollout": {"enabled": True}}


def test_rollout_version_schedule():
    # S = 1, E = 1 (lookahead 1): step j samples with the weights after j - 2 steps, from the drain point on
    assert [rollout_version(j, base=0, lookahead=1, sync_every=1) for j in range(1, 6)] == [0, 0, 1, 2, 3]
    # after a drain at step 4 the next rollouts restart from the checkpoint's weights
    assert [rollout_version(j, base=4, lookahead=1, sync_every=1) for j in range(5, 8)] == [4, 4, 5]
    # S = 3, E = 2 (lookahead 2): versions are multiples of 2, staleness j - 1 - v in [2, 3]
    versions = [rollout_version(j, base=0, lookahead=2, sync_every=2) for j in range(1, 10)]
    assert versions == [0, 0, 0, 0, 2, 2, 4, 4, 6]
    assert all(j - 1 - v <= 3 for j, v in zip(range(1, 10), versions, strict=True))


def test_async_config_errors():
    assert AsyncRolloutConfig(max_staleness=3, sync_every=2).lookahead == 2
    cases = [
        ({"async_rollout": {"enabled": True}}, "algorithm.clip=off_policy"),
        ({**ASYNC, "async_rollout": {"enabled": True, "sync_every": 2}}, "sync_every = 2 > max_staleness = 1"),
        ({**ASYNC, "async_rollout": {"enabled": True, "max_staleness": 0}}, "max_staleness = 0 must be >= 1"),
        ({**ASYNC, "sample_sources": ["depo"]}, "sample_sources"),
    ]
    for fields, message in cases:
        sub = fields.get("async_rollout", {})
        cfg = AlgorithmConfig(**{**fields, "async_rollout": AsyncRolloutConfig(**sub)})
        with pytest.raises(ConfigError, match=message):
            cfg.validate()


def test_async_multi_step_update_centres_on_the_current_weights_not_the_stale_sampler():
    """Exact sampler log-probs are the behaviour policy's; asynchronously they are stale, so a multi-step update
    rescores the old log-probs with the current weights (the off-policy clip's π_k) and keeps the sampler's as π_β."""
    from tests.step_batches import rescores_old_logp, step_batch
    from tests.trainer.toy_policy import ToyPolicy, ToyPolicyConfig

    torch.manual_seed(0)
    policy = ToyPolicy(ToyPolicyConfig(init_scale=1.0))
    rollout = policy.rollout([{"pid": 0}, {"pid": 1}], 4)
    with torch.no_grad():
        policy.logits.add_(0.5 * torch.randn_like(policy.logits))  # the trainer has updated since the sampling
        current = policy.score(rollout, ScoreRequest()).logp * rollout.action_mask
    table, weights = torch.rand(8, 1), torch.ones(1)
    stale = AlgorithmConfig(**ASYNC | {"async_rollout": AsyncRolloutConfig(enabled=True)}, inner_epochs=2)
    synchronous = AlgorithmConfig(clip="off_policy", inner_epochs=2)
    assert rescores_old_logp(stale, policy) and not rescores_old_logp(synchronous, policy)
    old = step_batch(policy, rollout, table, weights, stale)[0]["old_logp"]
    torch.testing.assert_close(old * rollout.action_mask, current)
    assert not torch.allclose(old * rollout.action_mask, rollout.old_logp * rollout.action_mask)
    old = step_batch(policy, rollout, table, weights, synchronous)[0]["old_logp"]
    torch.testing.assert_close(old, rollout.old_logp)  # synchronous: the sampler's weights are the current ones


def test_async_run_is_stale_as_scheduled_and_resumes_exactly(tmp_path, monkeypatch):
    straight = write_config(
        tmp_path / "a", algorithm=ASYNC, run={"save_every": 2, "output_dir": str(tmp_path / "a" / "run")}
    )
    run_cli("train", str(straight))
    records = metrics(tmp_path / "a" / "run")
    # drain points at the checkpoints (steps 2, 4): the rollout after each uses the weights saved there
    assert [r["rollout/staleness"] for r in records] == [0, 1, 0, 1, 0, 1]
    assert [r["rollout/policy_version"] for r in records] == [0, 0, 2, 2, 4, 4]

    sync = write_config(tmp_path / "s", algorithm={"clip": "off_policy"}, run={"output_dir": str(tmp_path / "s" / "r")})
    train_in_process(monkeypatch, sync)  # no rollout process: in this one
    sync_records = metrics(tmp_path / "s" / "r")
    assert records[0]["reward/mean"] == sync_records[0]["reward/mean"]  # step 1: same weights, same seeds
    assert [r["reward/mean"] for r in records] != [r["reward/mean"] for r in sync_records]  # stale afterwards

    crashed_dir = tmp_path / "b" / "run"
    crashing = write_config(tmp_path / "b", algorithm=ASYNC, run={"save_every": 2, "output_dir": str(crashed_dir)})
    proc = run_cli("train", str(crashing), "rewards.0.args={crash_on_call: 6}", check=False)
    assert proc.returncode == 17 and len(metrics(crashed_dir)) == 4
    run_cli("train", str(crashing), "run.resume=latest")
    assert without_times(metrics(crashed_dir)) == without_times(records)
    a = load_file(str(tmp_path / "a" / "run" / "checkpoints" / "step-6" / "policy" / "weights.safetensors"))
    b = load_file(str(crashed_dir / "checkpoints" / "step-6" / "policy" / "weights.safetensors"))
    torch.testing.assert_close(a["logits"], b["logits"], rtol=0, atol=0)


def test_async_flow_run_is_stale_as_scheduled_and_resumes_exactly(tmp_path):
    """The text-to-image demo (exact sampler log-probs; two optimizer steps per batch, so the old log-probs are the
    current weights' rescored, the sampler's the behaviour policy's) with the rollout process: the
    samples are one version old between checkpoints, and a run resumed from its step-2 checkpoint logs the metrics of
    the uninterrupted run."""
    import json
    import os
    import shutil
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    common = ["run.save_every=2", "algorithm.async_rollout.enabled=true", "algorithm.clip.name=off_policy",
              "eval.at_start=false", "eval.every=0", "eval.num_prompts=4", "eval.batch_size=4",
              "algorithm.prompts_per_step=2", "policy.sample_batch_size=16", "algorithm.micro_batch_size=16",
              "algorithm.minibatches=2", "policy.num_steps=4", "run.progress_bar=false",
              "data.train.args.size=64", "data.eval.args.size=8"]  # fmt: skip  # 8 of the demo's 20,256 prompts used
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)}

    def train(out: Path, steps: int, *extra: str) -> None:
        command = [sys.executable, "-m", "genalign.cli", "train", str(root / "configs" / "demo_shapes_flow_grpo.yaml"),
                   *common, f"run.max_steps={steps}", f"run.output_dir={out}", *extra]  # fmt: skip
        proc = prepared_python.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]

    def records(out: Path) -> list[dict]:
        lines = (out / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in lines]

    train(tmp_path / "straight", 4)
    expected = records(tmp_path / "straight")
    assert [r["rollout/staleness"] for r in expected] == [0, 1, 0, 1]
    # the run as it stood at its step-2 checkpoint (a drain point), then resumed from it
    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    shutil.rmtree(tmp_path / "resumed" / "checkpoints" / "step-4")
    log = tmp_path / "resumed" / "metrics.jsonl"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines()[:2]))  # steps 3-4 must be rerun
    train(tmp_path / "resumed", 4, "run.resume=latest")
    assert records(tmp_path / "resumed") == expected
