"""Checkpoints: atomic, pruned, verified by their manifest, and free of pickle (state as JSON + safetensors)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from genalign.trainer import checkpoint
from genalign.trainer.checkpoint import (
    CheckpointError,
    find_checkpoint,
    list_checkpoints,
    load_checkpoint,
    remove_temporary,
    save_checkpoint,
    verify_checkpoint,
)
from genalign.trainer.state_io import StateFormatError, load_state, save_state
from tests.trainer.toy_policy import ToyPolicy, ToyPolicyConfig


def _parts(policy):
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    return optimizer, scheduler


def _save(tmp_path, step, policy, keep_last=2):
    optimizer, scheduler = _parts(policy)
    state = {"data_cursor": step * 4, "extra": {}}
    return save_checkpoint(tmp_path, step, policy, optimizer, scheduler, state, keep_last, {"run": {"seed": 0}})


def test_checkpoints_are_complete_pruned_verified_and_found(tmp_path):
    policy = ToyPolicy(ToyPolicyConfig())
    for step in (1, 2, 3):
        _save(tmp_path, step, policy)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-2", "step-3"]
    found = find_checkpoint(tmp_path, "latest")
    assert found.path.name == "step-3" and not found.skipped and verify_checkpoint(found.path) is None
    names = sorted(p.relative_to(found.path).as_posix() for p in found.path.rglob("*") if p.is_file())
    assert "MANIFEST.json" in names and not [n for n in names if n.endswith((".pt", ".pkl", ".bin"))]


def test_a_half_written_checkpoint_is_never_picked(tmp_path):
    policy = ToyPolicy(ToyPolicyConfig())
    _save(tmp_path, 1, policy)
    (tmp_path / "checkpoints" / ".tmp-step-2").mkdir()  # a crash while writing step 2
    (tmp_path / "checkpoints" / "step-3").mkdir()  # a directory without the COMPLETE marker
    assert find_checkpoint(tmp_path, "latest").path.name == "step-1"
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        find_checkpoint(tmp_path, str(tmp_path / "checkpoints" / "step-3"))
    with pytest.raises(CheckpointError, match="holds no usable checkpoint"):
        find_checkpoint(tmp_path / "elsewhere", "latest")


class _KilledWhileDeleting(BaseException):
    """Stands for SIGKILL: nothing after it runs."""


def _rmtree_killed_after_one_file(path, ignore_errors=False):
    """Delete one file of ``path`` (the manifest's first, as a real deletion might), then die."""
    next(p for p in sorted(Path(path).rglob("*.json"))).unlink()
    raise _KilledWhileDeleting


@pytest.mark.parametrize("resave", [False, True], ids=["pruning", "re-saving the same step"])
def test_a_kill_while_deleting_a_checkpoint_leaves_no_half_deleted_complete_one(tmp_path, monkeypatch, resave):
    policy = ToyPolicy(ToyPolicyConfig())
    for step in (1, 2):
        _save(tmp_path, step, policy)
    monkeypatch.setattr(checkpoint.shutil, "rmtree", _rmtree_killed_after_one_file)
    with pytest.raises(_KilledWhileDeleting):
        _save(tmp_path, 2 if resave else 3, policy)
    monkeypatch.undo()
    complete = list_checkpoints(tmp_path)
    assert complete and all(verify_checkpoint(p) is None for p in complete)
    assert [p.name for p in complete] == (["step-1", "step-2"] if resave else ["step-2", "step-3"])
    assert [p.name for p in remove_temporary(tmp_path)] == [".tmp-retired-step-" + ("2" if resave else "1")]


def test_save_then_load_restores_optimizer_scheduler_policy_and_random_state(tmp_path):
    policy = ToyPolicy(ToyPolicyConfig(init_scale=1.0))
    optimizer, scheduler = _parts(policy)
    policy.logits.grad = torch.ones_like(policy.logits)
    optimizer.step()
    scheduler.step()
    random.seed(3), np.random.seed(4), torch.manual_seed(5)
    path = save_checkpoint(tmp_path, 7, policy, optimizer, scheduler, {"data_cursor": 9, "extra": {"a": [1, 2]}}, 2, {})
    expected = (random.random(), np.random.rand(), torch.rand(1))
    other = ToyPolicy(ToyPolicyConfig(init_scale=0.0))
    other_optimizer, other_scheduler = _parts(other)
    state = load_checkpoint(path, other, other_optimizer, other_scheduler)
    assert state == {"step": 7, "data_cursor": 9, "extra": {"a": [1, 2]}}
    assert torch.equal(other.logits, policy.logits)
    assert torch.equal(
        other_optimizer.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"]
    )
    assert other_scheduler.state_dict() == scheduler.state_dict()
    assert (random.random(), np.random.rand(), torch.rand(1)) == expected


def test_state_io_round_trips_nested_values_and_rejects_objects(tmp_path):
    value = {
        "a": (1, 2.5, float("inf")),
        3: [None, True, "x"],
        "t": torch.arange(4),
        "n": np.arange(3, dtype=np.uint32),
    }
    save_state(value, tmp_path / "state")
    loaded = load_state(tmp_path / "state")
    assert loaded["a"] == (1, 2.5, float("inf")) and loaded[3] == [None, True, "x"]
    assert torch.equal(loaded["t"], torch.arange(4)) and loaded["n"].dtype == np.uint32
    with pytest.raises(StateFormatError, match=r"bad\['f'\]: cannot save a function"):
        save_state({"f": lambda: 0}, tmp_path / "bad")
    (tmp_path / "state.json").write_text("{")
    with pytest.raises(StateFormatError, match=r"state\.json: unreadable"):
        load_state(tmp_path / "state")
