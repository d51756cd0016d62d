"""One writer per run directory: a second trainer (fresh or resumed) is refused naming the holder's PID and host, a
lock left by a killed process never blocks, and a start removes only dead writers' temporary folders (a planted
symbolic link is unlinked, never followed). Two trainers started at the same instant, 20 times:
benchmarks/bench_lock_trials.py."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from genalign.errors import UserError
from genalign.trainer import train
from genalign.trainer.checkpoint import list_checkpoints, remove_temporary, save_checkpoint, verify_checkpoint
from genalign.trainer.run_lock import RunLockedError, lock_path, writer_id
from tests.reliability.conftest import metrics, toy_config
from tests.trainer.test_checkpoint import _parts
from tests.trainer.toy_policy import ToyPolicy, ToyPolicyConfig

ROOT = Path(__file__).resolve().parents[2]
#: a process that takes the lock with genalign's own code (loaded alone: no torch import, starts in milliseconds)
HOLDER = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("run_lock", sys.argv[1])
run_lock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_lock)
lock = run_lock.RunLock.acquire(sys.argv[2])
print("held", flush=True)
time.sleep(600)
"""


def hold(output_dir: Path) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(ROOT / "genalign" / "trainer" / "run_lock.py"), str(output_dir)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_trainer_is_refused_naming_the_holder_and_a_killed_holder_never_blocks(tmp_path):
    train(toy_config(tmp_path, run={"max_steps": 2, "save_every": 1}))
    run_dir = tmp_path / "run"
    assert not lock_path(run_dir).exists()  # released (and removed) when the run ended
    before = (run_dir / "metrics.jsonl").read_text()
    holder = hold(run_dir)
    try:
        who = rf"PID {holder.pid} on host {socket.gethostname()}"
        with pytest.raises(RunLockedError, match=rf"is in use by another trainer: {who}.*run\.resume=latest") as err:
            train(toy_config(tmp_path, run={"max_steps": 4, "resume": "latest"}))
        assert isinstance(err.value, UserError)
        with pytest.raises(RunLockedError, match=who):  # a fresh start (run.overwrite too) is refused before its check
            train(toy_config(tmp_path, run={"max_steps": 4, "overwrite": True}))
        assert (run_dir / "metrics.jsonl").read_text() == before and run_dir.is_dir()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert lock_path(run_dir).exists()  # the killed holder's file stays, its lock does not
    train(toy_config(tmp_path, run={"max_steps": 3, "resume": "latest"}))
    assert [r["step"] for r in metrics(run_dir)] == [1, 2, 3] and not lock_path(run_dir).exists()


def test_a_fresh_start_in_a_folder_that_does_not_exist_yet_is_locked_too(tmp_path):
    holder = hold(tmp_path / "new-run")
    try:
        with pytest.raises(RunLockedError, match=rf"PID {holder.pid}"):
            train(toy_config(tmp_path, run={"output_dir": str(tmp_path / "new-run")}))
        with pytest.raises(RunLockedError, match=rf"PID {holder.pid}"):  # another spelling of the same folder
            train(toy_config(tmp_path, run={"output_dir": str(tmp_path / "x" / ".." / "new-run")}))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert not (tmp_path / "new-run").exists()


def test_a_start_removes_dead_writers_temporary_folders_only_and_never_follows_a_link(tmp_path):
    train(toy_config(tmp_path, run={"max_steps": 2, "save_every": 1}))
    root = tmp_path / "run" / "checkpoints"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = writer_id().rsplit("-", 1)[0]
    live = root / f".tmp-step-3.{host}-{sleeper.pid}"
    for folder in (live, root / f".tmp-step-3.{host}-{dead.pid}", root / ".tmp-step-4"):
        folder.mkdir()
        (folder / "optimizer.json").write_text("{}")
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    (root / ".tmp-step-7").symlink_to(outside, target_is_directory=True)  # used to stop every later save
    try:
        train(toy_config(tmp_path, run={"max_steps": 8, "save_every": 1, "resume": "latest"}))
        assert sorted(p.name for p in root.iterdir() if p.name.startswith(".tmp")) == [live.name]
    finally:
        sleeper.kill()
        sleeper.wait()
    assert (outside / "keep.txt").read_text() == "keep"
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["step-7", "step-8"]
    assert [p.name for p in remove_temporary(tmp_path / "run")] == [live.name]  # its writer is gone now


def test_a_link_planted_under_the_writers_own_temporary_name_is_unlinked(tmp_path):
    policy = ToyPolicy(ToyPolicyConfig())
    optimizer, scheduler = _parts(policy)
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    root = tmp_path / "out" / "checkpoints"
    root.mkdir(parents=True)
    (root / f".tmp-step-1.{writer_id()}").symlink_to(outside, target_is_directory=True)
    path = save_checkpoint(tmp_path / "out", 1, policy, optimizer, scheduler, {"data_cursor": 0, "extra": {}}, 2, {})
    assert verify_checkpoint(path) is None and (outside / "keep.txt").read_text() == "keep"
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
