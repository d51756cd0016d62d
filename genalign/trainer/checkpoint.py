"""Atomic checkpoints: ``output_dir/checkpoints/step-N/``.

A checkpoint is written into a temporary sibling directory, completed with a ``COMPLETE`` marker, then renamed into
place; a crash at any moment leaves either the previous checkpoints or the new complete one, never a half-written
directory that ``resume=latest`` would pick.

Layout: ``policy/`` (trainable weights as safetensors, LoRA adapters alone with LoRA), ``optimizer.pt``,
``scheduler.pt``, ``trainer_state.json`` (step, data cursor), ``trainer_extra.pt`` (estimator statistics),
``policy_state.pt`` (EMA and other non-weight state,
when the policy has any), ``rng.pt``, ``COMPLETE``.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genalign.policies.base import Policy

_STEP_DIR = re.compile(r"^step-(\d+)$")


def checkpoint_root(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints"


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = checkpoint_root(output_dir)
    if not root.is_dir():
        return []
    found = [
        (int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and (p / "COMPLETE").exists()
    ]
    return [p for _, p in sorted(found)]


def find_checkpoint(output_dir: str | Path, resume: str) -> Path:
    """Resolve ``resume`` ('latest' or a directory) to a complete checkpoint directory."""
    if resume == "latest":
        found = list_checkpoints(output_dir)
        if not found:
            raise FileNotFoundError(
                f"run.resume=latest but {checkpoint_root(output_dir)} holds no complete checkpoint; "
                "start without resume or point run.output_dir at the run to continue."
            )
        return found[-1]
    path = Path(resume)
    if not (path / "COMPLETE").exists():
        raise FileNotFoundError(f"run.resume={resume!r} is not a complete checkpoint directory (no COMPLETE marker).")
    return path


def save_checkpoint(
    output_dir: str | Path,
    step: int,
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    trainer_state: dict[str, Any],
    keep_last: int,
) -> Path:
    """Write checkpoint ``step`` atomically and delete all but the ``keep_last`` newest complete ones."""
    root = checkpoint_root(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    tmp = root / f".tmp-step-{step}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    policy.save(tmp / "policy")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    extra = getattr(policy, "state_dict_extra", None)
    if callable(extra):
        torch.save(extra(), tmp / "policy_state.pt")
    rng = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    torch.save(rng, tmp / "rng.pt")
    state = dict(trainer_state)
    torch.save(state.pop("extra", {}), tmp / "trainer_extra.pt")  # tensors and nested state (estimator statistics)
    (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **state}, indent=2))
    (tmp / "COMPLETE").write_text("")
    if final.exists():  # re-saving the same step (e.g. final save right after a periodic one)
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in list_checkpoints(output_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: Path, policy: Policy, optimizer: torch.optim.Optimizer, scheduler: Any) -> dict[str, Any]:
    """Restore weights, optimizer, scheduler, RNG and policy state; return the trainer state (with ``step``)."""
    policy.load(path / "policy")
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=False))
    if (path / "policy_state.pt").exists():
        policy.load_state_dict_extra(torch.load(path / "policy_state.pt", weights_only=False))
    rng = torch.load(path / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    state = json.loads((path / "trainer_state.json").read_text())
    state["extra"] = torch.load(path / "trainer_extra.pt", weights_only=False)
    return state
