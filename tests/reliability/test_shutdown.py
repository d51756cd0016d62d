"""SIGTERM and SIGINT end a run after the current step with a checkpoint of it, flushed logs and one line; the resumed
run equals the uninterrupted one; a second signal stops at once; handlers are put back; run.max_time_minutes still
stops (and checkpoints) the run. 20 signals at random steps of the LM demo: benchmarks/bench_signal_trials.py."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import pytest
import yaml

from genalign.config import to_dict
from genalign.trainer import recipe, train
from genalign.trainer.checkpoint import list_checkpoints, verify_checkpoint
from genalign.trainer.shutdown import StopSignals, TrainingInterrupted
from tests import prepared_python
from tests.reliability.conftest import metrics, toy_config

ROOT = Path(__file__).resolve().parents[2]


def without_times(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_signal_saves_the_step_reached_and_the_resume_equals_the_uninterrupted_run(tmp_path, monkeypatch, name):
    train(toy_config(tmp_path / "straight", run={"save_every": 4, "output_dir": str(tmp_path / "straight" / "run")}))
    real_step = recipe.training_step

    def step_then_signal(run, step):  # the signal arrives in the middle of step 3
        if step == 3:
            os.kill(os.getpid(), getattr(signal, name))
        return real_step(run, step)

    monkeypatch.setattr(recipe, "training_step", step_then_signal)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    config = toy_config(tmp_path, run={"save_every": 4})
    with pytest.raises(TrainingInterrupted, match=rf"received {name} at step 3: saved checkpoint step-3; resume with "
                                                  r"run\.resume=latest") as stopped:  # fmt: skip
        train(config)
    assert stopped.value.exit_code == 75 and stopped.value.checkpoint.name == "step-3"
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    run_dir = tmp_path / "run"
    assert [p.name for p in list_checkpoints(run_dir)] == ["step-3"] and verify_checkpoint(
        run_dir / "checkpoints" / "step-3"
    ) is None
    assert [r["step"] for r in metrics(run_dir)] == [1, 2, 3]
    monkeypatch.undo()
    train(toy_config(tmp_path, run={"save_every": 4, "resume": "latest"}))
    assert without_times(metrics(run_dir)) == without_times(metrics(tmp_path / "straight" / "run"))


def test_a_second_signal_stops_at_once_without_saving(tmp_path):
    """In a real process: the reward of step 3 (call 3: no evaluation at step 0) sends SIGTERM twice."""
    config = toy_config(tmp_path, run={"save_every": 0, "max_steps": 6})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(to_dict(config)))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = prepared_python.run(
        [sys.executable, str(ROOT / "tests" / "trainer" / "run_toy.py"), "train", str(path),
         "rewards.0.args={signal_on_call: 3, signal_times: 2}"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGTERM, proc.stderr[-2000:]
    assert "received SIGTERM: stopping after this step" in proc.stderr
    assert list_checkpoints(tmp_path / "run") == []  # nothing saved: the second signal ended it at once


def test_handlers_are_installed_only_in_the_main_thread_and_put_back():
    before = signal.getsignal(signal.SIGTERM)
    seen = {}

    def in_a_thread():
        with StopSignals():
            seen["inside"] = signal.getsignal(signal.SIGTERM)

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert seen["inside"] is before
    with StopSignals() as signals:
        assert signal.getsignal(signal.SIGTERM) == signals._handle
    assert signal.getsignal(signal.SIGTERM) is before


def test_max_time_minutes_still_stops_and_checkpoints_the_run(tmp_path, capsys):
    train(toy_config(tmp_path, run={"max_time_minutes": 1e-9, "save_every": 0}))
    assert [r["step"] for r in metrics(tmp_path / "run")] == [1]
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["step-1"]
    assert "run.max_time_minutes = 1e-09 reached after step 1" in capsys.readouterr().out
