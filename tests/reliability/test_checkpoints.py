"""Checkpoints are never executed and never block a resume: no pickle, manifests verified, a damaged newest
checkpoint skipped for the one before it, temporary folders of interrupted saves removed at the next start."""

from __future__ import annotations

import pickle

import pytest
import torch

from genalign.trainer import train
from genalign.trainer.checkpoint import CheckpointError, find_checkpoint, verify_checkpoint
from tests.reliability.conftest import metrics, toy_config


class Payload:
    """Unpickling this creates the file named in the constructor: proof that a pickle ran code."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_checkpoints_hold_no_pickle_and_a_planted_pickle_never_runs(tmp_path):
    train(toy_config(tmp_path, run={"max_steps": 2}))
    checkpoint = tmp_path / "run" / "checkpoints" / "step-2"
    assert not list(checkpoint.rglob("*.pt")) and not list(checkpoint.rglob("*.pkl"))
    marker = tmp_path / "pwned"
    for name in ("optimizer.pt", "rng.pt", "policy_state.pt", "trainer_extra.pt", "scheduler.pt"):
        (checkpoint / name).write_bytes(pickle.dumps(Payload(marker)))
        torch.save(Payload(marker), checkpoint / f"torch-{name}")
    assert (checkpoint / "train_state").is_dir()  # the distributed-checkpoint folder: torch's default reader unpickles
    (checkpoint / "train_state" / ".metadata").write_bytes(pickle.dumps(Payload(marker)))  # this file; ours never
    train(toy_config(tmp_path, run={"max_steps": 3, "resume": "latest"}))
    assert not marker.exists()
    # an old-style checkpoint (pickles only) is refused unless the user opts in, naming the risk
    legacy = tmp_path / "legacy" / "checkpoints" / "step-1"
    legacy.mkdir(parents=True)
    (legacy / "COMPLETE").write_text("")
    (legacy / "optimizer.pt").write_bytes(pickle.dumps(Payload(marker)))
    (legacy / "trainer_state.json").write_text('{"step": 1, "data_cursor": 0}')
    with pytest.raises(CheckpointError, match=r"unpickling can run arbitrary code.*allow_pickle_checkpoints"):
        train(toy_config(tmp_path / "legacy", run={"resume": str(legacy), "output_dir": str(tmp_path / "legacy")}))
    assert not marker.exists()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("truncate_weights", "truncated or changed"),
        ("corrupt_optimizer", "does not match its checksum"),
        ("break_trainer_state", "truncated or changed"),
        ("delete_manifest", "no MANIFEST.json"),
    ],
)
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(tmp_path, damage, reason, capsys):
    train(toy_config(tmp_path, run={"max_steps": 4}))
    newest = tmp_path / "run" / "checkpoints" / "step-4"
    if damage == "truncate_weights":
        path = newest / "policy" / "weights.safetensors"
        path.write_bytes(path.read_bytes()[:40])
    elif damage == "corrupt_optimizer":
        path = newest / "optimizer.safetensors"
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "break_trainer_state":
        (newest / "trainer_state.json").write_text("{broken")
    else:
        (newest / "MANIFEST.json").unlink()
    assert reason in verify_checkpoint(newest)
    found = find_checkpoint(tmp_path / "run", "latest")
    assert found.path.name == "step-2" and found.skipped[0][0] == newest
    train(toy_config(tmp_path, run={"max_steps": 5, "resume": "latest"}))
    assert f"skipped {newest}" in capsys.readouterr().out
    assert [r["step"] for r in metrics(tmp_path / "run")] == [1, 2, 3, 4, 5]


def test_a_torn_last_line_of_the_metrics_log_does_not_block_a_resume(tmp_path):
    train(toy_config(tmp_path, run={"max_steps": 2}))
    log = tmp_path / "run" / "metrics.jsonl"
    log.write_text(log.read_text() + '{"step": 3, "reward/me')  # killed while appending
    train(toy_config(tmp_path, run={"max_steps": 3, "resume": "latest"}))
    assert [r["step"] for r in metrics(tmp_path / "run")] == [1, 2, 3]


def test_temporary_folders_of_interrupted_saves_are_removed_at_the_next_start(tmp_path):
    train(toy_config(tmp_path, run={"max_steps": 2}))
    root = tmp_path / "run" / "checkpoints"
    (root / ".tmp-step-3").mkdir()
    (root / ".tmp-step-3" / "optimizer.json").write_text("{}")
    (root / ".tmp-step-4-1234").mkdir()  # the naming of older versions
    train(toy_config(tmp_path, run={"max_steps": 3, "resume": "latest"}))
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp")]


def test_no_usable_checkpoint_is_an_error_listing_each_reason(tmp_path):
    train(toy_config(tmp_path, run={"max_steps": 2, "keep_last": 1}))
    (tmp_path / "run" / "checkpoints" / "step-2" / "MANIFEST.json").write_text("not json")
    with pytest.raises(CheckpointError, match=r"no usable checkpoint\n  step-2: MANIFEST.json is unreadable"):
        find_checkpoint(tmp_path / "run", "latest")
