"""The training recipe end to end on the tabular toy policy: learning, logs, checkpoints, crash + resume, 2 processes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from genalign.trainer.checkpoint import list_checkpoints, verify_checkpoint
from tests import prepared_python
from tests.trainer.toy_policy import toy_rows

pytestmark = pytest.mark.heavy(cpu_s=90)  # scheduled first (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
RUN_TOY = ROOT / "tests" / "trainer" / "run_toy.py"
REQUIRED_METRICS = {
    "step", "reward/mean", "reward/std", "reward/match/mean", "loss", "kl", "entropy", "clip_frac",
    "frac_reward_zero_std", "completion_length/mean", "time/rollout_s", "time/update_s",
}  # fmt: skip


def write_config(tmp_path: Path, **sections) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    data_file = tmp_path / "rows.jsonl"
    data_file.write_text("".join(json.dumps(r) + "\n" for r in toy_rows(8)))
    config = {
        "policy": {"family": "toy", "num_prompts": 8, "layout_free_sampling": True},
        "data": {"train": {"source": str(data_file)}, "eval": {"source": str(data_file)}},
        "rewards": [{"fn": "toy_letter_match", "name": "match"}],
        "algorithm": {"group_size": 4, "prompts_per_step": 4, "micro_batch_size": 4, "kl_coef": 0.01},
        "optim": {"lr": 0.5, "max_grad_norm": None},
        "eval": {"num_prompts": 8},
        "run": {"output_dir": str(tmp_path / "run"), "max_steps": 6, "progress_bar": False},
    }
    for section, values in sections.items():
        config[section].update(values)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run_cli(*args: str, launcher: tuple[str, ...] = (sys.executable,), check: bool = True):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = prepared_python.run(
        [*launcher, str(RUN_TOY), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def train_in_process(monkeypatch, config: Path, *overrides: str) -> None:
    """``genalign train CONFIG k=v ...`` through the CLI's entry point in this process, with the toy family (as
    ``run_toy.py``): for runs whose subject is not a process boundary."""
    from genalign.cli import main
    from genalign.policies import FAMILY_MODULES

    monkeypatch.setitem(FAMILY_MODULES, "toy", "tests.trainer.toy_policy")
    assert main(["train", str(config), *overrides]) == 0


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def without_times(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


def test_training_learns_and_writes_every_artifact(tmp_path, capsys, monkeypatch):
    config = write_config(tmp_path, run={"max_steps": 25, "sample_every": 5, "dashboard": True})
    train_in_process(monkeypatch, config)
    run = tmp_path / "run"
    records = metrics(run)
    assert len(records) == 25 and set(records[0]) >= REQUIRED_METRICS
    first, last = records[0]["reward/mean"], sum(r["reward/mean"] for r in records[-5:]) / 5
    assert last > first + 0.3, (first, last)
    evals = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
    assert evals[0]["step"] == 0 and evals[-1]["step"] == 25 and evals[-1]["eval/accuracy"] > evals[0]["eval/accuracy"]
    assert json.loads((run / "eval.json").read_text())["eval/accuracy"] == evals[-1]["eval/accuracy"]
    assert (run / "dashboard.png").stat().st_size > 1000 and not (run / "reward_curve.png").exists()
    from genalign.cli import main

    capsys.readouterr()
    assert main(["report", str(run)]) == 0  # the dashboard redrawn from the logs, and the summary
    best = max(evals, key=lambda e: (e["eval/accuracy"], -e["step"]))
    summary = capsys.readouterr().out
    assert "25 of 25 steps, 2 evaluations, wall time " in summary
    assert f"held-out accuracy (match): best {best['eval/accuracy']:.4g} at step {best['step']}" in summary
    assert (run / "checkpoints" / "step-25" / "COMPLETE").exists()
    assert (run / "samples" / "step-5.jsonl").exists()
    assert yaml.safe_load((run / "config.yaml").read_text())["algorithm"]["group_size"] == 4


def test_crash_then_resume_reproduces_the_uninterrupted_run(tmp_path, monkeypatch):
    """The crash in its own process; the uninterrupted run and the resume in this one."""
    straight = write_config(tmp_path / "a", run={"save_every": 2, "output_dir": str(tmp_path / "a" / "run")})
    train_in_process(monkeypatch, straight)
    crashed_dir = tmp_path / "b" / "run"
    crashing = write_config(tmp_path / "b", run={"save_every": 2, "output_dir": str(crashed_dir)})
    # One reward call per step plus the eval at step 0: call 6 is step 5, after the checkpoint of step 4.
    proc = run_cli("train", str(crashing), "rewards.0.args={crash_on_call: 6}", check=False)
    assert proc.returncode == 17
    assert len(metrics(crashed_dir)) == 4
    assert not any(p.name.startswith(".tmp") for p in (crashed_dir / "checkpoints").iterdir())
    train_in_process(monkeypatch, crashing, "run.resume=latest")
    assert without_times(metrics(crashed_dir)) == without_times(metrics(tmp_path / "a" / "run"))
    a = load_file(str(tmp_path / "a" / "run" / "checkpoints" / "step-6" / "policy" / "weights.safetensors"))
    b = load_file(str(crashed_dir / "checkpoints" / "step-6" / "policy" / "weights.safetensors"))
    torch.testing.assert_close(a["logits"], b["logits"], rtol=0, atol=0)


TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")


@pytest.fixture(scope="module")
def one_process_run(tmp_path_factory) -> Path:
    """The one-process reference of the multi-process tests: 2 steps of layout-free sampling (so that any number of
    processes trains on the same samples); its run folder."""
    folder = tmp_path_factory.mktemp("one")
    one = write_config(
        folder, run={"max_steps": 2, "output_dir": str(folder / "run")}, policy={"layout_free_sampling": True}
    )
    run_cli("train", str(one))
    return folder / "run"


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_one_and_two_processes_give_the_same_parameters(tmp_path, strategy, one_process_run):
    """Sampling that does not depend on the process layout, so two processes train on the same samples as one."""
    settings = {"max_steps": 2}
    policy = {"layout_free_sampling": True}
    two = write_config(
        tmp_path / "two",
        run={**settings, "output_dir": str(tmp_path / "two" / "run"), "distributed": strategy},
        policy=policy,
    )
    proc = run_cli("train", str(two), launcher=TORCHRUN)
    assert proc.stdout.count('"eval/accuracy"') == 1, "the result is printed by the main process only"
    a = load_file(str(one_process_run / "checkpoints" / "step-2" / "policy" / "weights.safetensors"))
    b = load_file(str(tmp_path / "two" / "run" / "checkpoints" / "step-2" / "policy" / "weights.safetensors"))
    assert not torch.equal(a["logits"], torch.zeros_like(a["logits"]))
    torch.testing.assert_close(a["logits"], b["logits"], rtol=1e-6, atol=1e-7)
    assert without_times(metrics(one_process_run))[-1]["reward/mean"] == pytest.approx(
        without_times(metrics(tmp_path / "two" / "run"))[-1]["reward/mean"]
    )


def test_two_processes_stop_after_the_same_step_when_one_of_them_is_signalled(tmp_path):
    """Process 1 alone receives SIGTERM during step 3 (its reward's 3rd call): the per-step agreement stops both
    after step 3 and each writes its part of checkpoint step-3 (resuming N processes from M: tests/parallel)."""
    config = write_config(tmp_path, run={"max_steps": 8, "distributed": "ddp"}, eval={"at_start": False})
    proc = run_cli("train", str(config), "rewards.0.args={signal_on_call: 3, signal_rank: 1}", launcher=TORCHRUN,
                   check=False)  # fmt: skip
    assert "received SIGTERM at step 3: saved checkpoint step-3; resume with run.resume=latest" in proc.stderr
    run = tmp_path / "run"
    assert [r["step"] for r in metrics(run)] == [1, 2, 3]
    assert [p.name for p in list_checkpoints(run)] == ["step-3"] and verify_checkpoint(
        run / "checkpoints" / "step-3"
    ) is None
    assert (run / "checkpoints" / "step-3" / "rng-rank1.json").exists()  # process 1 wrote its part


def test_hybrid_sharding_over_four_processes_and_bf16_gathering(tmp_path, one_process_run):
    """Shard groups of 2 replicated twice (HSDP) give the one-process parameters; gathering parameters in bf16 trains
    float32 master weights."""
    settings = {"max_steps": 2}
    policy = {"layout_free_sampling": True}
    reference = load_file(str(one_process_run / "checkpoints" / "step-2" / "policy" / "weights.safetensors"))
    launchers = {"hybrid": (*TORCHRUN[:-1], "4"), "bf16": TORCHRUN}
    fsdp = {"hybrid": {"shard_size": 2}, "bf16": {"param_dtype": "bfloat16"}}
    for name, launcher in launchers.items():
        run = {**settings, "output_dir": str(tmp_path / name / "run"), "distributed": "fsdp", "fsdp": fsdp[name]}
        run_cli("train", str(write_config(tmp_path / name, run=run, policy=policy)), launcher=launcher)
        weights = load_file(str(tmp_path / name / "run" / "checkpoints" / "step-2" / "policy" / "weights.safetensors"))
        assert weights["logits"].dtype == torch.float32  # the master weights
        if name == "hybrid":
            torch.testing.assert_close(weights["logits"], reference["logits"], rtol=1e-6, atol=1e-7)
        else:  # trained, and by bf16 arithmetic (the rounded log-probs change which tokens are drawn)
            assert weights["logits"].isfinite().all() and weights["logits"].abs().sum() > 0
            assert not torch.equal(weights["logits"], reference["logits"])


def test_dynamic_sampling_trains_only_informative_groups(tmp_path, monkeypatch):
    config = write_config(
        tmp_path,
        algorithm={"dynamic_sampling": {"enabled": True, "oversample": 2.0}},
        run={"max_steps": 3, "output_dir": str(tmp_path / "run")},
    )
    train_in_process(monkeypatch, config)
    for record in metrics(tmp_path / "run"):
        assert record["num_samples"] == 8 * 4  # 2 × 4 prompts sampled, G = 4
        informative = round((1 - record["frac_reward_zero_std"]) * 8)
        assert record["num_trained_samples"] == 4 * min(informative, 4)
